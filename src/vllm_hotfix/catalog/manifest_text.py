"""Writing manifest text: TOML values, and edits to an existing manifest that keep every other byte.

`hotfix new` renders whole manifests with ``toml_value``; `hotfix port` adds ``[[patches]]`` tables
and changes the ``versions`` of existing ones with ``edit_patches``, line by line, so a manifest's
comments, signatures and layout stay as their author wrote them. Every edit is checked by loading the
result with the strict loader and comparing it with what was meant: a manifest we cannot load back
exactly is never returned.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any, Mapping, Sequence

from vllm_hotfix.catalog.manifest import manifest_from_dict
from vllm_hotfix_guard.core.data import load_toml
from vllm_hotfix.catalog.model import Manifest, PatchSpec
from vllm_hotfix_guard.errors import InvalidInput

_MULTILINE_SAFE = re.compile(r"[^\x00-\x09\x0b-\x1f\x7f]*")  # no control characters but newline
_TABLE_HEADER = re.compile(r"^\s*\[")
_PATCHES_HEADER = re.compile(r"^\s*\[\[\s*patches\s*\]\]\s*(#.*)?$")
_VERSIONS_KEY = re.compile(r"^\s*versions\s*=")


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if "\n" in value and _MULTILINE_SAFE.fullmatch(value):
            return '"""\n' + value.replace("\\", "\\\\").replace('"', '\\"') + '"""'
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def table_lines(name: str, row: Mapping[str, Any]) -> list[str]:
    return [f"[[{name}]]"] + [f"{k} = {toml_value(v)}" for k, v in row.items()]


def _blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(first, end) line indices of each [[patches]] table (end: the next table header or EOF)."""
    out = []
    for i, line in enumerate(lines):
        if _PATCHES_HEADER.match(line):
            end = next((j for j in range(i + 1, len(lines)) if _TABLE_HEADER.match(lines[j])), len(lines))
            out.append((i, end))
    return out


def edit_patches(text: str, source: str, manifest: Manifest, *, versions: Mapping[int, str | None],
                 added: Sequence[Mapping[str, Any]]) -> str:
    """``text`` with ``patches[i].versions`` set for each i in ``versions`` and the ``added`` tables
    appended after the last [[patches]] table; InvalidInput when the result would not load back as exactly that."""
    lines = text.split("\n")
    blocks = _blocks(lines)
    if len(blocks) != len(manifest.patches):
        raise InvalidInput(f"{source}: found {len(blocks)} [[patches]] tables in the text but the manifest has "
                           f"{len(manifest.patches)}; edit it by hand")
    for index in sorted(versions, reverse=True):  # bottom-up: earlier line numbers stay valid
        first, end = blocks[index]
        value = versions[index]
        key = next((j for j in range(first + 1, end) if _VERSIONS_KEY.match(lines[j])), None)
        new_line = None if value is None else f"versions = {toml_value(value)}"
        if key is not None and new_line is not None:
            lines[key] = new_line
        elif key is not None:
            del lines[key]
        elif new_line is not None:
            lines.insert(first + 1, new_line)
    blocks = _blocks(lines)
    end = blocks[-1][1] if blocks else len(lines)
    while end > 0 and not lines[end - 1].strip():
        end -= 1
    insert: list[str] = []
    for row in added:
        insert += ["", *table_lines("patches", row)]
    lines[end:end] = insert
    result = "\n".join(lines)
    _check(result, source, manifest, versions, len(added))
    return result


def _check(result: str, source: str, manifest: Manifest, versions: Mapping[int, str | None], added: int) -> None:
    loaded = manifest_from_dict(load_toml(result.encode(), source), source, patches_dir=manifest.patches_dir)
    wanted = tuple(replace(p, versions=versions[i]) if i in versions else p for i, p in enumerate(manifest.patches))
    if loaded.patches[:len(wanted)] != wanted or len(loaded.patches) != len(wanted) + added:
        raise InvalidInput(f"{source}: could not add the ported patches without changing other keys; edit it by hand")
    if replace(loaded, patches=manifest.patches) != manifest:
        raise InvalidInput(f"{source}: editing [[patches]] changed other keys; edit it by hand")


def patch_row(spec: PatchSpec) -> dict[str, Any]:
    """A ``file`` PatchSpec as the [[patches]] table that declares it."""
    row: dict[str, Any] = {"file": spec.file}
    if spec.versions is not None:
        row["versions"] = spec.versions
    row["strip"] = spec.strip
    if spec.md5:
        row["md5"] = spec.md5
    row["sha256"] = spec.sha256
    if spec.stats is not None:
        row["stats"] = {"files": spec.stats.files, "insertions": spec.stats.insertions,
                        "deletions": spec.stats.deletions}
    if spec.description:
        row["description"] = spec.description
    return row
