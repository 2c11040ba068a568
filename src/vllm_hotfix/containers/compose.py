"""Round-trip edits of docker-compose files: add or remove read-only bind mounts of exported files.

Pure text in, text out (no file I/O): the command reads and writes. Comments, key order, quotes and
every other mount survive because ruamel.yaml round-trips them. A comment that sits after the last
entry of a collection belongs (to the reader) to what follows it, but ruamel attaches it to that last
entry; every edit therefore moves such a trailing block to the new last entry, so that appending and
then removing our entries gives back the original text byte for byte.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from vllm_hotfix.errors import InvalidInput, Refused, UsageError
from vllm_hotfix.containers.lockfile import Lock, LockedHotfix

LOCK_IN_CONTAINER = "/etc/vllm-hotfix/hotfix.lock"
LOCK_ENV = "HOTFIX_LOCK"


@dataclass(frozen=True)
class Mount:
    source: str  # host path as written in the compose file
    target: str  # absolute path inside the container

    @property
    def spec(self) -> str:
        return f"{self.source}:{self.target}:ro"


@dataclass(frozen=True)
class Mounts:
    hotfix: tuple[Mount, ...]  # one per exported file
    lock: Mount
    export_source: str  # host path of the export directory as written (prefix of every source)

    @property
    def env_value(self) -> str:
        return self.lock.target


@dataclass(frozen=True)
class Edit:
    text: str
    added: tuple[str, ...]
    removed: tuple[str, ...]


def host_source(export_dir: Path, compose_dir: Path) -> str:
    """``./relative`` when the export lives under the compose file's directory, else absolute."""
    export_abs = Path(os.path.abspath(export_dir))
    compose_abs = Path(os.path.abspath(compose_dir))
    try:
        rel = export_abs.relative_to(compose_abs)
    except ValueError:
        return export_abs.as_posix()
    return "./" + rel.as_posix() if rel.parts else "."


def mounts_for(lock: Lock, hotfixes: tuple[LockedHotfix, ...], export_source: str,
               container_site_packages: Optional[str] = None) -> Mounts:
    site = (container_site_packages or lock.site_packages).rstrip("/")
    if not site.startswith("/"):
        raise UsageError(f"container site-packages must be an absolute path, got {site!r}")
    files = tuple(
        Mount(f"{export_source}/{f.export}", f"{site}/{f.path}") for h in hotfixes for f in h.files
    )
    return Mounts(files, Mount(f"{export_source}/hotfix.lock", LOCK_IN_CONTAINER), export_source)


# -- YAML round trip -------------------------------------------------------------------------------


def _yaml(text: str):
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 1 << 16
    mapping, sequence, offset = _detect_indent(text)
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    return yaml


def _detect_indent(text: str) -> tuple[int, int, int]:
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


def _load(text: str, source: str) -> Any:
    from ruamel.yaml.error import YAMLError

    try:
        return _yaml(text).load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InvalidInput(f"{source}{where}: not valid YAML: {problem}") from None


def _dump(doc: Any, original: str) -> str:
    out = io.StringIO()
    _yaml(original).dump(doc, out)
    return out.getvalue()


def _service(doc: Any, service: str, source: str, *, create: bool) -> Any:
    from ruamel.yaml.comments import CommentedMap

    if doc is None and create:
        doc = CommentedMap()
    if not isinstance(doc, dict):
        raise InvalidInput(f"{source}: top level is not a mapping")
    services = doc.get("services")
    if services is None and create:
        services = doc["services"] = CommentedMap()
    if not isinstance(services, dict):
        raise InvalidInput(f"{source}: key 'services' is missing or not a mapping")
    if service not in services:
        if not create:
            names = ", ".join(map(str, services)) or "(none)"
            raise UsageError(f"{source}: no service {service!r}; services: {names}")
        services[service] = CommentedMap()
    if services[service] is None:
        services[service] = CommentedMap()
    if not isinstance(services[service], dict):
        raise InvalidInput(f"{source}: key 'services.{service}' is not a mapping")
    return doc, services[service]


# -- trailing comment blocks -----------------------------------------------------------------------


def _is_block(node: Any) -> bool:
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    return isinstance(node, (CommentedMap, CommentedSeq)) and len(node) > 0 and not node.fa.flow_style()


def _last_slot(node: Any) -> Optional[tuple[Any, Any, int]]:
    """(collection, key, comment position) of the comment that ends ``node``'s last line."""
    from ruamel.yaml.comments import CommentedSeq

    if not _is_block(node):
        return None
    while True:
        if isinstance(node, CommentedSeq):
            key, pos = len(node) - 1, 0
        else:
            key, pos = list(node.keys())[-1], 2
        child = node[key]
        if not _is_block(child):
            return node, key, pos
        node = child


def _take_trailing(node: Any) -> str:
    """Detach the comment lines after ``node``'s last line (keeping that line's own comment)."""
    slot = _last_slot(node)
    if slot is None:
        return ""
    owner, key, pos = slot
    entry = owner.ca.items.get(key)
    token = entry[pos] if entry and len(entry) > pos else None
    if token is None:
        return ""
    head, _, rest = token.value.partition("\n")
    if not rest:
        return ""
    if head:
        token.value = head + "\n"
    else:
        entry[pos] = None
        if not any(entry):
            del owner.ca.items[key]
    return rest


def _put_trailing(node: Any, rest: str) -> None:
    slot = _last_slot(node) if rest else None
    if slot is not None:
        _append_comment(*slot, rest)


def _append_comment(owner: Any, key: Any, pos: int, rest: str) -> None:
    from ruamel.yaml.error import CommentMark
    from ruamel.yaml.tokens import CommentToken

    entry = owner.ca.items.setdefault(key, [None, None, None, None])
    if entry[pos] is None:
        entry[pos] = CommentToken("\n" + rest, CommentMark(0))
    else:
        entry[pos].value += rest


def _put_before(mapping: Any, key: Any, rest: str) -> None:
    """Re-home the trailing block of ``mapping[key]`` (about to be deleted) onto the entry before it."""
    keys = list(mapping.keys())
    index = keys.index(key)
    if not rest or index == 0:
        return
    previous = keys[index - 1]
    if _is_block(mapping[previous]):
        _put_trailing(mapping[previous], rest)
    else:
        _append_comment(mapping, previous, 2, rest)


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


def add_mounts(text: str, service: str, mounts: Mounts, *, source: str = "docker-compose.yml",
               create_service: bool = False) -> Edit:
    """Add the read-only mounts and HOTFIX_LOCK to ``service``; nothing changes when all are there."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    doc, svc = _service(_load(text, source), service, source, create=create_service)
    wanted = [*mounts.hotfix, mounts.lock]
    volumes = svc.get("volumes")
    if volumes is not None and not isinstance(volumes, list):
        raise InvalidInput(f"{source}: key 'services.{service}.volumes' is not a list")
    present = {str(v) for v in volumes or ()}
    targets = {_volume_target(v): v for v in volumes or ()}
    for mount in wanted:
        other = targets.get(mount.target)
        if mount.spec not in present and other is not None:
            raise Refused(
                f"{source}: services.{service}.volumes already mounts {mount.target} from another source: {other}",
                hint="remove that entry (or `hotfix compose --remove` an older export) first",
            )
    missing = [m.spec for m in wanted if m.spec not in present]
    env = svc.get("environment")
    if env is not None and not isinstance(env, (list, dict)):
        raise InvalidInput(f"{source}: key 'services.{service}.environment' is neither a list nor a mapping")
    need_env = _env_has(env, LOCK_ENV) is None
    if not missing and not need_env:
        return Edit(text, (), ())

    tail = _take_trailing(svc)
    if missing:
        if volumes is None:
            volumes = svc["volumes"] = CommentedSeq()
        inner = _take_trailing(volumes)
        volumes.extend(missing)
        _put_trailing(volumes, inner)
    if need_env:
        if env is None:
            env = svc["environment"] = CommentedMap()
        inner = _take_trailing(env)
        if isinstance(env, dict):
            env[LOCK_ENV] = mounts.env_value
        else:
            env.append(f"{LOCK_ENV}={mounts.env_value}")
        _put_trailing(env, inner)
    _put_trailing(svc, tail)
    added = tuple(missing) + ((f"{LOCK_ENV}={mounts.env_value}",) if need_env else ())
    return Edit(_dump(doc, text), added, ())


def remove_mounts(text: str, service: str, mounts: Mounts, *, source: str = "docker-compose.yml") -> Edit:
    """Take exactly our mounts out; the lock mount and HOTFIX_LOCK go when no hotfix mount is left."""
    doc, svc = _service(_load(text, source), service, source, create=False)
    volumes = svc.get("volumes")
    if volumes is not None and not isinstance(volumes, list):
        raise InvalidInput(f"{source}: key 'services.{service}.volumes' is not a list")
    volumes = volumes if volumes is not None else []
    # matched by host source and read-only mode, so a different --container-site-packages still finds them
    ours = {m.source for m in mounts.hotfix}
    prefix = mounts.export_source + "/"
    sources = {v: _read_only_source(v) for v in volumes if isinstance(v, str)}
    remaining_hotfix = [v for v, src in sources.items()
                        if src and src not in ours and src.startswith(prefix) and src != mounts.lock.source]
    drop = set(ours)
    env = svc.get("environment")
    drop_env = False
    if not remaining_hotfix:
        drop.add(mounts.lock.source)
        drop_env = _env_has(env, LOCK_ENV) == mounts.env_value
    removed = [v for v, src in sources.items() if src in drop]
    if not removed and not drop_env:
        return Edit(text, (), ())

    tail = _take_trailing(svc)
    if removed:
        inner = _take_trailing(volumes)
        for spec in removed:
            volumes.remove(spec)
        if volumes:
            _put_trailing(volumes, inner)
        else:
            _put_before(svc, "volumes", inner)
            del svc["volumes"]
    if drop_env:
        inner = _take_trailing(env)
        if isinstance(env, dict):
            del env[LOCK_ENV]
        else:
            env.remove(f"{LOCK_ENV}={mounts.env_value}")
        if env:
            _put_trailing(env, inner)
        else:
            _put_before(svc, "environment", inner)
            del svc["environment"]
    _put_trailing(svc, tail)
    gone = tuple(removed) + ((f"{LOCK_ENV}={mounts.env_value}",) if drop_env else ())
    return Edit(_dump(doc, text), (), gone)


def service_is_empty(text: str, service: str, *, source: str) -> bool:
    """True when an override file holds nothing but an empty ``services.<service>`` (we can delete it)."""
    doc = _load(text, source)
    if not isinstance(doc, dict) or set(doc) != {"services"} or not isinstance(doc["services"], dict):
        return False
    return set(doc["services"]) == {service} and not doc["services"][service]
