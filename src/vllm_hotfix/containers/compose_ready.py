"""Readiness in a compose service (docs/readiness.md): a tmpfs for the guard's records, HOTFIX_READY_DIR, and
``python3 -I -m vllm_hotfix_guard ready`` as the healthcheck. A second pass over the text compose.add_mounts
wrote (the service exists then, with its own ``environment``), and one before compose.remove_mounts that
takes exactly these lines out again; whole lines at the positions ruamel's composer reports (yamledit), so
the rest of the file stays byte for byte. A healthcheck of the service's own is kept: its ``test`` becomes one
that runs the guard's probe and then it (readiness.combined_test, k8s's combined readinessProbe's program),
and `--remove` puts its text back. What else is there and not ours (a tmpfs written as one string, an
environment shared through an anchor, a healthcheck that is turned off or not a block mapping) is never
edited: refused, naming ``--no-readiness``."""

from __future__ import annotations

from typing import Any, Optional

from vllm_hotfix.containers import readiness as ready
from vllm_hotfix.containers import yamledit as ye
from vllm_hotfix_guard.errors import Refused
from vllm_hotfix_guard.settings import READY_DIR_ENV

HINT = "add them by hand (docs/readiness.md), or pass --no-readiness"


def healthcheck_lines(indent: int, step: int, python: str) -> list[str]:
    test = ", ".join(ready.probe_command(python))
    return [f"{' ' * indent}healthcheck:", f"{' ' * (indent + step)}test: [CMD, {test}]",
            f"{' ' * (indent + step)}interval: {ready.PERIOD}s", f"{' ' * (indent + step)}timeout: {ready.TIMEOUT}s",
            f"{' ' * (indent + step)}retries: {ready.FAILURES}"]


def _service(text: str, service: str, source: str):
    doc = ye.compose(text, source)
    services = ye.get(doc.root, "services") if ye.is_mapping(doc.root) else None
    found = ye.get(services[1], service) if services and ye.is_mapping(services[1]) else None
    if found is None or not ye.is_mapping(found[1]) or found[1].flow_style:
        raise Refused(f"{source}: services.{service} is not a block mapping: readiness not added", hint=HINT)
    return doc, found[0], found[1]


def ours(node: Any) -> bool:
    """A healthcheck whose test runs the guard's `ready`."""
    test = ye.get(node, "test") if ye.is_mapping(node) else None
    value = ye.scalar_value(test[1]) if test else None
    return ready.GUARD_MODULE in (" ".join(map(str, value)) if isinstance(value, list) else str(value))


def add_readiness(text: str, service: str, *, source: str,
                  python: str = ready.IMAGE_PYTHON) -> tuple[str, tuple[str, ...], Optional[str]]:
    """The text with the tmpfs, HOTFIX_READY_DIR and the healthcheck in ``service``, and what was added; or
    the text unchanged, nothing added, and why (what is there and not ours is never edited)."""
    try:
        return (*_added(text, service, source, python), None)
    except Refused as exc:
        return text, (), exc.message


def _added(text: str, service: str, source: str, python: str) -> tuple[str, tuple[str, ...]]:
    doc, key, node = _service(text, service, source)
    nl, (mapping, _, offset) = doc.newline, ye.detect_indent(text)
    first = next(iter(ye.pairs(node)), None)
    indent = first[0].start_mark.column if first else key.start_mark.column + mapping
    changes, added, new_keys = [], [], []
    env = ye.get(node, "environment")
    if env is None or doc.shared(env[1]) or env[1].flow_style or ye.is_null(env[1]):
        raise Refused(f"{source}: services.{service}.environment is not the service's own block list or mapping: "
                      f"{READY_DIR_ENV} not added", hint=HINT)
    values = ye.scalar_value(env[1])
    present = values.get(READY_DIR_ENV) if isinstance(values, dict) else next(
        (str(v).partition("=")[2] for v in values if str(v).partition("=")[0] == READY_DIR_ENV), None)
    if present is None:
        if ye.is_sequence(env[1]):
            line = f"{' ' * _dash(text, env[1])}- {ye.plain(f'{READY_DIR_ENV}={ready.READY_IN_CONTAINER}')}"
        else:
            line = f"{' ' * env[1].value[0][0].start_mark.column}{READY_DIR_ENV}: {ready.READY_IN_CONTAINER}"
        changes.append(_insert(text, ye.line_end(text, ye.content_end(env[1])), [line], nl))
        added.append(f"{READY_DIR_ENV}={ready.READY_IN_CONTAINER}")
    tmpfs = ye.get(node, "tmpfs")
    if tmpfs is None:
        new_keys += [f"{' ' * indent}tmpfs:", f"{' ' * (indent + offset)}- {ready.READY_IN_CONTAINER}"]
        added.append(f"tmpfs {ready.READY_IN_CONTAINER}")
    elif ready.READY_IN_CONTAINER not in (ye.scalar_value(tmpfs[1]) or ()):
        if not ye.is_sequence(tmpfs[1]) or tmpfs[1].flow_style or doc.shared(tmpfs[1]):
            raise Refused(f"{source}: services.{service}.tmpfs is not the service's own block list: not edited", hint=HINT)
        changes.append(_insert(text, ye.line_end(text, ye.content_end(tmpfs[1])),
                               [f"{' ' * _dash(text, tmpfs[1])}- {ready.READY_IN_CONTAINER}"], nl))
        added.append(f"tmpfs {ready.READY_IN_CONTAINER}")
    check = ye.get(node, "healthcheck")
    if check is None:
        new_keys += healthcheck_lines(indent, mapping, python)
        added.append(f"healthcheck {' '.join(ready.probe_command(python))}")
    elif not ours(check[1]):  # the service's own check is kept: both run in one test (as k8s's readinessProbe)
        changes.append(_combined(text, doc, check, f"{source}: services.{service}.healthcheck", python))
        added.append(f"healthcheck: its own test kept, combined with `{' '.join(ready.probe_command(python))}` "
                     "(healthy only when both pass)")
    if new_keys:
        changes.append(_insert(text, ye.line_end(text, ye.content_end(node)), new_keys, nl))
    return ye.apply(text, changes), tuple(added)


def _combined(text: str, doc: Any, check: tuple, where: str, python: str) -> ye.Change:
    """The healthcheck's ``test`` value replaced by readiness.combined_test (the guard's probe, then the
    service's own test, within the healthcheck's own timeout), carrying the value's text for `--remove`; the
    rest of the healthcheck (interval, timeout, retries, start_period) stays the service's."""
    node = check[1]
    if not ye.is_mapping(node) or node.flow_style or doc.shared(node):
        raise Refused(f"{where} (line {doc.line_of(check[0])}) is not the service's own block mapping: not combined",
                      hint=HINT)
    values = ye.scalar_value(node)
    if str(values.get("disable", "")).lower() == "true":
        raise Refused(f"{where} is turned off (disable: true): not combined", hint=HINT)
    test = ye.get(node, "test")
    if test is None or ye.is_null(test[1]) or doc.shared(test[1]):
        raise Refused(f"{where} has no test of its own (the image's would run): not combined", hint=HINT)
    timeout = ready.duration_seconds(values.get("timeout", "30s"))
    if timeout is None:
        raise Refused(f"{where}.timeout is not a duration such as 30s: not combined", hint=HINT)
    start, end = test[1].start_mark.index, ye.content_end(test[1])
    words = ready.combined_test(ye.scalar_value(test[1]), timeout, f"{where}.test", python, keep=text[start:end])
    return ye.Change(start, end, "[" + ", ".join(ye.plain(w) for w in words) + "]")


def _dash(text: str, sequence: Any) -> int:
    """The column of a block list's dashes (its node may start at a tag such as !override)."""
    first = sequence.value[0].start_mark.index
    before = text[ye.line_start(text, first):first]
    return before.find("-") if before.strip() == "-" else sequence.start_mark.column


def _insert(text: str, at: int, lines: list[str], nl: str) -> ye.Change:
    """Whole lines at ``at``; at the end of a file without a final newline it stays without one."""
    block = nl.join(lines)
    if at == len(text) and text and not text.endswith("\n"):
        return ye.Change(at, at, nl + block)
    return ye.Change(at, at, block + nl)


def remove_readiness(text: str, service: str, *, source: str) -> tuple[str, tuple[str, ...]]:
    """The text without the lines add_readiness wrote (matched by value: our env entry, our tmpfs entry, a
    healthcheck running `ready`), and what was removed; the text itself when none is there."""
    try:
        doc, _, node = _service(text, service, source)
    except Refused:
        return text, ()
    spans, removed = [], []
    env = ye.get(node, "environment")
    if env is not None and not ye.is_null(env[1]) and not env[1].flow_style:
        for start, end, value in _entries(env[1]):
            if value in (f"{READY_DIR_ENV}={ready.READY_IN_CONTAINER}", f"{READY_DIR_ENV}: {ready.READY_IN_CONTAINER}"):
                spans.append((start, end))
                removed.append(f"{READY_DIR_ENV}={ready.READY_IN_CONTAINER}")
    tmpfs = ye.get(node, "tmpfs")
    if tmpfs is not None and ye.is_sequence(tmpfs[1]) and not tmpfs[1].flow_style:
        mine = [(s, e) for s, e, value in _entries(tmpfs[1]) if value == ready.READY_IN_CONTAINER]
        spans += [(tmpfs[0].start_mark.index, ye.content_end(tmpfs[1]))] if len(mine) == len(tmpfs[1].value) else mine
        removed += [f"tmpfs {ready.READY_IN_CONTAINER}"] if mine else []
    check, restored = ye.get(node, "healthcheck"), []
    if check is not None and ours(check[1]):
        test = ye.get(check[1], "test") if ye.is_mapping(check[1]) else None
        kept = ready.kept_test(ye.scalar_value(test[1])) if test is not None else None
        if kept is not None:  # a combined test: the service's own test, as its file had it, goes back
            restored.append(ye.Change(test[1].start_mark.index, ye.content_end(test[1]), kept))
            removed.append("healthcheck: the guard's probe (its own test restored)")
        else:
            spans.append((check[0].start_mark.index, ye.content_end(check[1])))
            removed.append("healthcheck")
    changes = [ye.Change(ye.line_start(text, s), ye.line_end(text, e)) for s, e in spans] + restored
    edited = ye.apply(text, changes)
    if text and not text.endswith("\n") and edited.endswith("\n"):  # no final newline before: none after
        edited = edited[:-2] if edited.endswith("\r\n") else edited[:-1]
    return edited, tuple(removed)


def _entries(node: Any) -> list[tuple[int, int, Optional[str]]]:
    """(start, end, text) of each entry of a block list (its scalar) or mapping ("KEY: VALUE")."""
    if ye.is_sequence(node):
        return [(n.start_mark.index, ye.content_end(n), n.value if n.id == "scalar" else None) for n in node.value]
    return [(k.start_mark.index, ye.content_end(v), f"{k.value}: {v.value}" if v.id == "scalar" else None)
            for k, v in ye.pairs(node)]
