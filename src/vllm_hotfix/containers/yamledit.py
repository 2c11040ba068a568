"""Byte-exact YAML edits: insert or delete whole lines at the positions ruamel.yaml's composer reports.

Nothing is re-serialised: a `---` marker, CRLF line ends, quotes, comments, indentation and every other
service stay exactly as written, and deleting what was inserted gives back the original text. The node
graph also tells which nodes are shared: an anchor (``&common``) reached through an alias (``*common``,
``<<: *common``) is one node object reached twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from vllm_hotfix_guard.errors import InvalidInput

MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass
class Document:
    """A YAML file read for editing in place: its bytes, line ends and parsed tree."""

    text: str
    root: Any  # ruamel.yaml.nodes.Node or None (empty file)
    references: dict[int, int] = field(default_factory=dict)  # id(node) -> how many places reach it

    @property
    def newline(self) -> str:
        return "\r\n" if "\r\n" in self.text else "\n"

    def shared(self, node: Any) -> bool:
        return self.references.get(id(node), 0) > 1

    def line_of(self, node: Any) -> int:
        return node.start_mark.line + 1


def compose(text: str, source: str) -> Document:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        root = YAML().compose(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InvalidInput(f"{source}{where}: not valid YAML: {problem}") from None
    check_aliases(root, source)
    doc = Document(text, root)
    _count(root, doc.references)
    return doc


# YAML aliases: a half-KB compose file whose `volumes: *j` names 9 levels of 9 aliases each stands for
# 387 million entries; walking it took minutes and gigabytes. go-yaml v3 refuses "excessive aliasing"
# (past ~400,000 decodes driven by aliases) when it decodes into values; docker compose v2.40.3 and
# kubectl kustomize v5.5.0 were still at work on that file after 60 s (2026-12-02). We refuse, while
# loading, a document whose aliases stand for more than ALIAS_EXPANSION_LIMIT nodes beyond those written.
ALIAS_EXPANSION_LIMIT = 100_000


def check_aliases(root: Any, source: str) -> None:
    """InvalidInput (exit 8) when the aliases of a composed document stand for more than
    ``ALIAS_EXPANSION_LIMIT`` nodes beyond those written, or an alias is recursive. Linear in the nodes
    written: each node's expanded size is counted once."""
    sizes: dict[int, int] = {}
    written = 0
    stack: list[tuple[Any, bool]] = [(root, False)] if root is not None else []
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if not children_done:
            if key in sizes:
                if sizes[key] < 0:
                    raise InvalidInput(f"{source}:{node.start_mark.line + 1}: a YAML alias refers to a node that holds "
                                       f"it (a recursive alias)")
                continue
            sizes[key] = -1  # in progress
            written += 1
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))
            continue
        sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
        if sizes[key] - written > ALIAS_EXPANSION_LIMIT:
            raise InvalidInput(f"{source}:{node.start_mark.line + 1}: YAML aliases here stand for more than "
                               f"{ALIAS_EXPANSION_LIMIT:,} nodes (excessive aliasing, as go-yaml calls it)",
                               hint="write the values out, or use fewer levels of anchors")


def _children(node: Any) -> list:
    if not isinstance(node.value, list):
        return []
    return [child for item in node.value for child in (item if isinstance(item, tuple) else (item,))]


def _count(node: Any, seen: dict[int, int]) -> None:
    if node is None:
        return
    seen[id(node)] = seen.get(id(node), 0) + 1
    if seen[id(node)] > 1 or not isinstance(node.value, list):
        return
    for item in node.value:
        for child in item if isinstance(item, tuple) else (item,):
            _count(child, seen)


def is_mapping(node: Any) -> bool:
    return node is not None and node.id == "mapping"


def is_sequence(node: Any) -> bool:
    return node is not None and node.id == "sequence"


def is_null(node: Any) -> bool:
    return node is None or (node.id == "scalar" and node.tag.endswith(":null"))


def pairs(mapping: Any) -> Iterator[tuple[Any, Any]]:
    """The mapping's own key/value nodes (merge keys left out)."""
    for key, value in mapping.value:
        if key.tag != MERGE_TAG:
            yield key, value


def get(mapping: Any, name: str) -> Optional[tuple[Any, Any]]:
    for key, value in pairs(mapping):
        if key.id == "scalar" and key.value == name:
            return key, value
    return None


def merged(mapping: Any, name: str) -> Optional[tuple[Any, Any]]:
    """(the anchored mapping it comes from, the value) when ``name`` reaches ``mapping`` only by ``<<:``."""
    for key, value in mapping.value:
        if key.tag != MERGE_TAG:
            continue
        for source in value.value if is_sequence(value) else [value]:
            if is_mapping(source):
                found = get(source, name) or merged(source, name)
                if found is not None:
                    return source, found[1]
    return None


def scalar_value(node: Any) -> Any:
    """A plain Python value for reading entries: str for scalars, dict/list one level deep."""
    if node is None:
        return None
    if node.id == "scalar":
        return None if is_null(node) else node.value
    if node.id == "sequence":
        return [scalar_value(n) for n in node.value]
    return {scalar_value(k): scalar_value(v) for k, v in node.value if k.tag != MERGE_TAG}


def detect_indent(text: str) -> tuple[int, int, int]:
    """(mapping indent, sequence indent, dash offset) as used by the file, compose-style defaults."""
    mapping, sequence, offset = 2, 4, 2
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    for prev, line in zip(lines, lines[1:]):
        prev_indent = len(prev) - len(prev.lstrip(" "))
        indent = len(line) - len(line.lstrip(" "))
        if not prev.rstrip().endswith(":") or indent <= prev_indent and not line.lstrip().startswith("- "):
            continue
        if line.lstrip().startswith("- "):
            offset = indent - prev_indent
            sequence = offset + 2
            break
    for prev, line in zip(lines, lines[1:]):
        prev_indent = len(prev) - len(prev.lstrip(" "))
        indent = len(line) - len(line.lstrip(" "))
        if prev.rstrip().endswith(":") and indent > prev_indent and not line.lstrip().startswith("- "):
            mapping = indent - prev_indent
            break
    return mapping, max(sequence, offset + 2), offset


# --- positions ---------------------------------------------------------------------------------------


def content_end(node: Any) -> int:
    """Index just after the last character that belongs to ``node`` (not the comments after it)."""
    if node.id == "scalar" or node.flow_style:
        if node.id == "scalar" and node.style in ("|", ">") and node.end_mark.column == 0:
            return node.end_mark.index - 1
        return node.end_mark.index
    if not node.value:
        return node.start_mark.index
    last = node.value[-1]
    return content_end(last[1] if isinstance(last, tuple) else last)


def line_start(text: str, index: int) -> int:
    return text.rfind("\n", 0, index) + 1


def line_end(text: str, index: int) -> int:
    """Index after the newline that ends the line holding ``index`` (len(text) on the last line)."""
    found = text.find("\n", index)
    return len(text) if found < 0 else found + 1


@dataclass(frozen=True)
class Change:
    """One edit of a YAML document at a node's position."""

    start: int
    end: int  # == start for an insertion
    text: str = ""


def apply(text: str, changes: list[Change]) -> str:
    """Apply non-overlapping changes (positions in the original text), last first; ties keep list order."""
    ordered = sorted(enumerate(changes), key=lambda c: (c[1].start, c[0]), reverse=True)
    for _, change in ordered:
        text = text[:change.start] + change.text + text[change.end:]
    return text


def plain(value: str, *, key: bool = False) -> str:
    """``value`` as written in YAML: plain when it reads back as the same string, else double-quoted."""
    import json

    from ruamel.yaml import YAML

    probe = f"{value}: x" if key else f"- {value}"
    try:
        loaded = YAML(typ="safe", pure=True).load(probe)
    except Exception:
        loaded = None
    ok = (list(loaded) == [value]) if key and isinstance(loaded, dict) else (loaded == [value])
    return value if ok and value.strip() == value and value else json.dumps(value)
