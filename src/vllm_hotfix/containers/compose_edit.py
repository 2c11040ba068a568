"""Edits of docker-compose files as people write them: add or remove read-only bind mounts of exports.

Pure text in, text out (no file I/O): the command reads and writes. Nothing is re-serialised: whole
lines are inserted and deleted at the positions ruamel.yaml reports (``yamledit``), so comments, quotes,
a ``---`` marker, CRLF line ends and every other service stay byte for byte, and ``remove_mounts``
gives back the original text. A node shared through an anchor (``<<: *common``, ``environment: *env``)
is never edited: that would change every service using it; the refusal says so and points at
``--override``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from vllm_hotfix.containers import yamledit as ye
from vllm_hotfix_guard.errors import InvalidInput, Refused, UsageError

from vllm_hotfix.containers.compose_mounts import Edit, Mounts, escaped
from vllm_hotfix_guard.settings import LOCK_ENV, STRICT_ENV


# -- where to write ----------------------------------------------------------------------------


@dataclass
class _Service:
    """A service of a compose file and where its volumes list sits."""

    doc: ye.Document
    node: Any                 # the service's mapping node (None when it does not exist yet)
    name: str
    source: str
    insert_at: int = 0        # where lines for a missing service / empty file go
    indent: int = 0           # column of the service's keys


def _find(text: str, service: str, source: str, *, create: bool) -> _Service:
    doc = ye.compose(text, source)
    root = doc.root
    if ye.is_null(root):
        if not create:
            raise InvalidInput(f"{source}: top level is not a mapping")
        return _Service(doc, None, service, source, len(text), -1)
    if not ye.is_mapping(root):
        raise InvalidInput(f"{source}: top level is not a mapping")
    found = ye.get(root, "services")
    if found is None or not (ye.is_mapping(found[1]) or create and ye.is_null(found[1])):
        raise InvalidInput(f"{source}: key 'services' is missing or not a mapping")
    key, services = found
    if ye.is_null(services):
        return _Service(doc, None, service, source, ye.line_end(text, key.end_mark.index), key.start_mark.column + 2)
    entry = ye.get(services, service)
    if entry is None:
        if not create:
            names = ", ".join(str(k.value) for k, _ in ye.pairs(services)) or "(none)"
            raise UsageError(f"{source}: no service {service!r}; services: {names}")
        first = next(iter(ye.pairs(services)))[0]
        return _Service(doc, None, service, source, _after(text, services), first.start_mark.column)
    key, node = entry
    if doc.shared(node) or (ye.is_mapping(node) and node.anchor and doc.references.get(id(node), 0) > 1):
        raise Refused(f"{source}: services.{service} is an alias of a mapping other services share: "
                      "editing it would change them too", hint=_override_hint(service))
    if ye.is_null(node):
        return _Service(doc, None, service, source, ye.line_end(text, key.end_mark.index), key.start_mark.column + 2)
    _check_tag(_Service(doc, node, service, source), node, f"services.{service}")
    if not ye.is_mapping(node):
        raise InvalidInput(f"{source}: key 'services.{service}' is not a mapping")
    if node.flow_style:
        raise Refused(f"{source}: services.{service} is written in flow style ({{...}}): not edited",
                      hint=_override_hint(service))
    first = next(iter(ye.pairs(node)), None)
    indent = first[0].start_mark.column if first else key.start_mark.column + 2
    return _Service(doc, node, service, source, _after(text, node), indent)


def _after(text: str, node: Any) -> int:
    """Where a line appended to ``node`` goes: after the line its content ends on."""
    return ye.line_end(text, ye.content_end(node))


def _override_hint(service: str) -> str:
    return (f"write the mounts to an override file instead (--override compose.hotfix.yml: compose merges its "
            f"volumes and environment into services.{service} alone), or give services.{service} its own key")


def _local(svc: _Service, key: str) -> Optional[Any]:
    """The service's own value node for ``key``; refused when editing it would touch a shared node."""
    if svc.node is None:
        return None
    found = ye.get(svc.node, key)
    doc, where = svc.doc, f"{svc.source}: services.{svc.name}.{key}"
    if found is not None:
        value = found[1]
        if doc.shared(value):
            anchor = f" &{value.anchor}" if value.anchor else ""
            raise Refused(f"{where} is the anchored node{anchor} (line {doc.line_of(value)}) that other places "
                          "also use: editing it would change them too", hint=_override_hint(svc.name))
        return value
    inherited = ye.merged(svc.node, key)
    if inherited is not None:
        origin, _ = inherited
        anchor = f" &{origin.anchor}" if origin.anchor else ""
        raise Refused(f"{where} comes from the shared anchor{anchor} (line {doc.line_of(origin)}) by `<<:`; "
                      f"editing it would change every service using it, and a key of its own would drop "
                      "the inherited entries", hint=_override_hint(svc.name))
    return None


# -- volumes and environment -----------------------------------------------------------------------


def _volume_target(entry: Any) -> Optional[str]:
    if isinstance(entry, str):
        parts = entry.split(":")
        return parts[1] if len(parts) >= 2 else parts[0]
    if isinstance(entry, dict):
        return entry.get("target")
    return None


def _read_only_source(entry: str) -> Optional[str]:
    """The host source of a short-syntax ``SOURCE:TARGET:ro`` entry, None for anything else."""
    parts = entry.split(":")
    return parts[0] if len(parts) == 3 and parts[2] == "ro" else None


def _env_has(env: Any, name: str) -> Optional[str]:
    """The value of ``name`` in a list- or mapping-style environment (None when absent)."""
    if isinstance(env, dict):
        return str(env[name]) if name in env and env[name] is not None else ("" if name in env else None)
    for item in env or ():
        key, sep, value = str(item).partition("=")
        if key == name:
            return value
    return None


def _effective(svc: _Service, key: str) -> Any:
    """The value node compose uses for ``key`` (the service's own, else one merged in by ``<<:``)."""
    if svc.node is None:
        return None
    found = ye.get(svc.node, key) or ye.merged(svc.node, key)
    if found is None:
        return None
    _check_tag(svc, found[1], f"services.{svc.name}.{key}")
    return found[1]


# compose v2's merge tags (compose-spec "merge"): `!override` replaces what earlier files set with this
# value, so our entries belong inside it like in any list; `!reset` drops the value altogether (only
# what earlier files set is reset), so entries written there would never be mounted.
OVERRIDE_TAG, RESET_TAG = "!override", "!reset"


def _check_tag(svc: _Service, node: Any, where: str) -> None:
    tag = getattr(node, "tag", "") or ""
    if tag == RESET_TAG:
        raise Refused(f"{svc.source}: {where} is tagged !reset (line {svc.doc.line_of(node)}): compose drops its "
                      f"value, so mounts written into it would never be mounted",
                      hint=f"put the mounts in an override file loaded after this one (--override FILE: its "
                           f"entries add to the reset value), or drop the tag")
    if tag.startswith("!") and tag != OVERRIDE_TAG:
        raise Refused(f"{svc.source}: {where} carries the YAML tag {tag} (line {svc.doc.line_of(node)}), which "
                      f"compose does not define: not edited", hint=_override_hint(svc.name))


def _spans(node: Any) -> list[tuple[Any, int, int]]:
    """(element, start, end) of each item of a sequence / pair of a mapping, as positions in the text."""
    if ye.is_sequence(node):
        return [(item, item.start_mark.index, ye.content_end(item)) for item in node.value]
    return [(k, k.start_mark.index, ye.content_end(v)) for k, v in ye.pairs(node)]  # a pair by its key node


def _append(svc: _Service, node: Any, key_node: Any, entries: list[str]) -> ye.Change:
    """Lines (block) or items (flow) appended to an existing collection, or under a ``key:`` left empty."""
    text, nl = svc.doc.text, svc.doc.newline
    mapping, _, offset = ye.detect_indent(text)
    if ye.is_null(node):
        col = key_node.start_mark.column
        lines = "".join(f"{' ' * (col + offset)}- {e}{nl}" for e in entries)
        return ye.Change(ye.line_end(text, key_node.end_mark.index), ye.line_end(text, key_node.end_mark.index), lines)
    if node.flow_style:
        items = [e if not any(c in e for c in ",[]{}") or e.startswith('"') else _quoted(e) for e in entries]
        at = node.end_mark.index - 1
        return ye.Change(at, at, (", " if node.value else "") + ", ".join(items))
    if ye.is_sequence(node):  # the first item's dash (the node itself starts at a tag such as !override)
        first = node.value[0].start_mark.index
        before = text[ye.line_start(text, first):first]
        dash = before.find("-") if before.strip() == "-" else node.start_mark.column
        prefix = " " * dash + "- "
    else:
        prefix = " " * node.value[0][0].start_mark.column
    return _at_line(text, _after(text, node), "".join(f"{prefix}{e}{nl}" for e in entries), nl)


def _at_line(text: str, at: int, lines: str, nl: str) -> ye.Change:
    """Insert whole lines at ``at``; at the end of a file without a final newline, it stays without one
    (the newline goes before our lines, and removal takes it back)."""
    if at == len(text) and text and not text.endswith("\n"):
        return ye.Change(at, at, nl + lines[:-len(nl)])
    return ye.Change(at, at, lines)


def _quoted(value: str) -> str:
    import json

    return json.dumps(value)


def _new_keys(svc: _Service, volumes: list[str], env: Optional[list[str]]) -> ye.Change:
    """A block of new keys for the service (and the service itself when it is missing)."""
    text, nl = svc.doc.text, svc.doc.newline
    mapping, _, offset = ye.detect_indent(text)
    indent, header = svc.indent, ""
    if indent < 0:  # empty file
        header, indent = f"services:{nl}{' ' * mapping}{ye.plain(svc.name, key=True)}:{nl}", 2 * mapping
    elif svc.node is None and not _service_key_exists(svc):
        header, indent = f"{' ' * indent}{ye.plain(svc.name, key=True)}:{nl}", indent + mapping
    body = ""
    if volumes:
        body += f"{' ' * indent}volumes:{nl}" + "".join(f"{' ' * (indent + offset)}- {v}{nl}" for v in volumes)
    if env is not None:
        body += f"{' ' * indent}environment:{nl}" + "".join(f"{' ' * (indent + mapping)}{e}{nl}" for e in env)
    return _at_line(text, svc.insert_at, header + body, nl)


def _service_key_exists(svc: _Service) -> bool:
    services = ye.get(svc.doc.root, "services") if ye.is_mapping(svc.doc.root) else None
    return bool(services and ye.is_mapping(services[1]) and ye.get(services[1], svc.name))


def add_mounts(text: str, service: str, mounts: Mounts, *, source: str = "docker-compose.yml",
               create_service: bool = False) -> Edit:
    """Add the read-only mounts and HOTFIX_LOCK to ``service``; nothing changes when all are there."""
    svc = _find(text, service, source, create=create_service)
    wanted = [*mounts.hotfix, mounts.lock]
    volumes_node = _effective(svc, "volumes")
    if volumes_node is not None and not ye.is_null(volumes_node) and not ye.is_sequence(volumes_node):
        raise InvalidInput(f"{source}: key 'services.{service}.volumes' is not a list")
    volumes = ye.scalar_value(volumes_node) or []
    present = {str(v) for v in volumes}
    targets = {_volume_target(v): v for v in volumes}
    for mount in wanted:
        other = targets.get(escaped(mount.target))
        if mount.spec not in present and other is not None:
            raise Refused(
                f"{source}: services.{service}.volumes already mounts {mount.target} from another source: {other}",
                hint="remove that entry (or `hotfix compose --remove` an older export) first",
            )
    missing = [m.spec for m in wanted if m.spec not in present]
    env_node = _effective(svc, "environment")
    if env_node is not None and not ye.is_null(env_node) and not (ye.is_sequence(env_node) or ye.is_mapping(env_node)):
        raise InvalidInput(f"{source}: key 'services.{service}.environment' is neither a list nor a mapping")
    values = ye.scalar_value(env_node)
    need_env = _env_has(values, LOCK_ENV) is None
    need_strict = mounts.wants_strict(_env_has(values, STRICT_ENV), f"{source}: services.{service}.environment")
    if not missing and not need_env and not need_strict:
        return Edit(text, (), ())

    changes, new_volumes, new_env = [], [], None
    if missing:
        local = _local(svc, "volumes")
        if local is None:
            new_volumes = [ye.plain(m) for m in missing]
        else:
            changes.append(_append(svc, local, ye.get(svc.node, "volumes")[0], [ye.plain(m) for m in missing]))
    env = [(LOCK_ENV, mounts.env_value)] * need_env + [(STRICT_ENV, STRICT_ON)] * need_strict
    if env:  # HOTFIX_STRICT right after HOTFIX_LOCK, where remove_mounts looks for it
        local = _local(svc, "environment")
        after = None if local is None or need_env else _after_entry(svc, local, LOCK_ENV, _env_lines(local, env))
        if local is None:
            new_env = _env_lines(local, env)
        elif after is not None:
            changes.append(after)
        else:
            changes.append(_append(svc, local, ye.get(svc.node, "environment")[0], _env_lines(local, env)))
    if new_volumes or new_env is not None:
        changes.append(_new_keys(svc, new_volumes, new_env))
    added = tuple(missing) + tuple(f"{name}={value}" for name, value in env)
    return Edit(ye.apply(text, changes), added, ())


STRICT_ON = "1"  # what HOTFIX_STRICT is written as (and, right after HOTFIX_LOCK, taken out again)


def _env_lines(node: Any, env: list[tuple[str, str]]) -> list[str]:
    """``env`` as entries of a list-style environment (``NAME=VALUE``; an empty ``environment:`` gets a list)
    or a mapping-style one."""
    if ye.is_sequence(node) or (node is not None and ye.is_null(node)):
        return [ye.plain(f"{name}={value}") for name, value in env]
    return [f"{name}: {ye.plain(value)}" for name, value in env]


def _after_entry(svc: _Service, node: Any, name: str, entries: list[str]) -> Optional[ye.Change]:
    """``entries`` right after the entry for ``name`` in an environment (block or flow); None when it is not
    there (or not on a line of its own)."""
    text, nl = svc.doc.text, svc.doc.newline
    found = [(start, end) for (_, (key, _)), (_, start, end) in zip(_named(node), _spans(node)) if key == name]
    if not found:
        return None
    start, end = found[0]
    if node.flow_style:
        return ye.Change(end, end, "".join(f", {e}" for e in entries))
    prefix = text[ye.line_start(text, start):start]
    lines = "".join(f"{prefix}{e}{nl}" for e in entries)
    return _at_line(text, ye.line_end(text, end), lines, nl) if prefix.strip() in ("", "-") else None


def _removals(text: str, key: Any, node: Any, drop: set[int]) -> list[ye.Change]:
    """Changes that take the elements whose ids are in ``drop`` out of ``node`` (and ``key:`` if none is left)."""
    spans = _spans(node)
    kept = [i for i, (element, _, _) in enumerate(spans) if id(element) not in drop]
    if not kept and node.flow_style:
        return [ye.Change(spans[0][1], spans[-1][2])]
    if not kept:
        return [ye.Change(ye.line_start(text, key.start_mark.index), _after(text, node))]
    if not node.flow_style:
        return [ye.Change(ye.line_start(text, start), ye.line_end(text, end))
                for element, start, end in spans if id(element) in drop]
    changes, first = [], kept[0]
    if first > 0:
        changes.append(ye.Change(spans[0][1], spans[first][1]))
    for i in range(first + 1, len(spans)):
        if id(spans[i][0]) in drop:
            changes.append(ye.Change(spans[i - 1][2], spans[i][2]))
    return changes


def remove_mounts(text: str, service: str, mounts: Mounts, *, source: str = "docker-compose.yml") -> Edit:
    """Take exactly our mounts out; the lock mount and HOTFIX_LOCK go when no hotfix mount is left."""
    svc = _find(text, service, source, create=False)
    volumes_node = _effective(svc, "volumes")
    if volumes_node is not None and not ye.is_null(volumes_node) and not ye.is_sequence(volumes_node):
        raise InvalidInput(f"{source}: key 'services.{service}.volumes' is not a list")
    items = volumes_node.value if ye.is_sequence(volumes_node) else []
    # matched by host source and read-only mode, so a different --container-site-packages still finds them
    ours = {escaped(m.source) for m in mounts.hotfix}
    prefix = escaped(mounts.export_source) + "/"
    lock_source = escaped(mounts.lock.source)
    sources = {id(n): (n.value, _read_only_source(n.value)) for n in items if n.id == "scalar"}
    remaining_hotfix = [v for v, src in sources.values()
                        if src and src not in ours and src.startswith(prefix) and src != lock_source]
    drop = set(ours)
    env_node = _effective(svc, "environment")
    drop_env = strict = False
    if not remaining_hotfix:
        drop.add(lock_source)
        drop_env = _env_has(ye.scalar_value(env_node), LOCK_ENV) == mounts.env_value
    removed = {i: v for i, (v, src) in sources.items() if src in drop}
    if not removed and not drop_env:
        return Edit(text, (), ())
    changes = []
    if removed:
        local = _local(svc, "volumes")
        changes += _removals(text, ye.get(svc.node, "volumes")[0], local, set(removed))
    if drop_env:
        local = _local(svc, "environment")
        ids, strict = _lock_entries(local)
        changes += _removals(text, ye.get(svc.node, "environment")[0], local, ids)
    gone = tuple(removed.values()) + ((f"{LOCK_ENV}={mounts.env_value}",) if drop_env else ())
    gone += (f"{STRICT_ENV}={STRICT_ON}",) if drop_env and strict else ()
    edited = ye.apply(text, changes)
    if text and not text.endswith("\n") and edited.endswith("\n"):  # no final newline before: none after
        edited = edited[:-2] if edited.endswith("\r\n") else edited[:-1]
    return Edit(edited, (), gone)


def _lock_entries(node: Any) -> tuple[set[int], bool]:
    """The ids of HOTFIX_LOCK's entry and of a HOTFIX_STRICT=1 right after it (add_mounts writes it there:
    one the user wrote elsewhere stays), and whether that one is there."""
    named = _named(node)
    lock = {id(e) for e, (name, _) in named if name == LOCK_ENV}
    strict = {id(e) for (before, _), (e, entry) in zip(named, named[1:])
              if id(before) in lock and entry == (STRICT_ENV, STRICT_ON)}
    return lock | strict, bool(strict)


def _named(node: Any) -> list[tuple[Any, tuple[Optional[str], Optional[str]]]]:
    """(element, (name, value)) of each entry of an environment, as _spans gives its elements."""
    if ye.is_sequence(node):
        return [(n, tuple(n.value.partition("=")[::2]) if n.id == "scalar" else (None, None)) for n in node.value]
    return [(k, (k.value, v.value if v.id == "scalar" else None)) for k, v in ye.pairs(node)]


def service_is_empty(text: str, service: str, *, source: str) -> bool:
    """True when an override file holds nothing but an empty ``services.<service>`` (we can delete it)."""
    doc = ye.compose(text, source).root
    if not ye.is_mapping(doc) or [k.value for k, _ in ye.pairs(doc)] != ["services"]:
        return False
    services = ye.get(doc, "services")[1]
    if not ye.is_mapping(services) or [k.value for k, _ in ye.pairs(services)] != [service]:
        return False
    value = ye.get(services, service)[1]
    return ye.is_null(value) or (ye.is_mapping(value) and not value.value)
