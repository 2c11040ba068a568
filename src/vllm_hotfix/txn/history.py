"""history.jsonl of one target: who changed what, when, with which outcome -- the one reader and writer.

One JSON object per line, appended by the transaction that makes the change: the new file is written
whole (atomic replace) as part of the same journalled commit as the files and state.json
(txn.journal.commit(also=...)), so a crash before the commit point gives back the old history with the
old files, and after it the new line with the new files: no entry is lost or invented. Bounded: when
a line would take the file over ``HISTORY_CAP``, the file becomes ``history.1.jsonl`` (the one before it
is dropped) and a new one starts, both in that same transaction.

Read back as input (``paths.read_own_file``: a regular file of ours, no symlink, capped); every line is
validated and a broken one is named by file and line (InvalidInput, exit 8).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from vllm_hotfix_guard.core.data import load_json
from vllm_hotfix_guard.core.docfields import Fields
from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix_guard.paths import TargetDir, read_own_file

HISTORY_CAP = 1 << 20       # a file is rotated before a line would take it over this (~3,000 entries)
HISTORY_LIMIT = 2 << 20     # what a history file we wrote can be when read back; larger is not ours
OUTCOMES = ("applied", "upgraded", "adopted", "rolled-back", "forgotten")  # forgotten: a record of another release
FINGERPRINT_PREFIX = "hf1-"


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One change of a target, as history.jsonl keeps it."""

    time: str                    # ISO 8601 UTC, as state.json's applied_at
    user: str                    # the effective user's name (uid N when it has none)
    uid: int
    sudo_user: str | None        # SUDO_USER, when a user ran it through sudo
    host: str
    pid: int
    command: str                 # the command line that made the change
    outcome: str                 # one of OUTCOMES
    hotfix: str
    version: int | str
    fingerprint: str             # of the target's recorded series after the change (what `status` prints)
    series: tuple[str, ...]      # the recorded series after the change, in order
    files: int                   # files the change wrote
    root: str
    distribution: str | None
    installed_version: str | None
    detail: str = ""             # e.g. the record dropped, the hotfixes re-derived

    def to_line(self) -> bytes:
        doc = asdict(self)
        doc["series"] = list(self.series)
        return (json.dumps(doc, separators=(",", ":")) + "\n").encode()  # ASCII: a path undecodable here stays \udcXX


def parse_line(line: bytes, source: str) -> Entry:
    """One line, validated: InvalidInput names ``source`` (FILE:LINE) and the key. Text is printed back
    to a terminal by `hotfix log`: control characters are refused."""
    f = Fields(source)
    doc = f.mapping(load_json(line, source), "")
    for key, value in doc.items():
        if isinstance(value, str) and any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
            raise f.fail(key, "holds a control character")
    outcome = f.text(doc, "", "outcome")
    if outcome not in OUTCOMES:
        raise f.fail("outcome", f"expected one of {', '.join(OUTCOMES)}, got {outcome!r}")
    fingerprint = f.text(doc, "", "fingerprint")
    if not (fingerprint.startswith(FINGERPRINT_PREFIX) and len(fingerprint) <= 40 and fingerprint.isprintable()):
        raise f.fail("fingerprint", f"not a fingerprint: {fingerprint!r}")
    uid, pid, files = (f.get(doc, "", key, int) for key in ("uid", "pid", "files"))
    if min(uid, pid, files) < 0:
        raise f.fail("uid", "negative numbers")
    series = tuple(f.record_id(item, f"series[{i}]") for i, item in enumerate(f.items(doc.get("series"), "series")))
    return Entry(time=f.text(doc, "", "time", limit=40), user=f.text(doc, "", "user", limit=256), uid=uid,
                 sudo_user=f.text(doc, "", "sudo_user", required=False, limit=256), host=f.text(doc, "", "host", limit=256),
                 pid=pid, command=f.text(doc, "", "command", limit=8192), outcome=outcome,
                 hotfix=f.record_id(doc.get("hotfix"), "hotfix"), version=f.version(doc, ""), fingerprint=fingerprint,
                 series=series, files=files, root=f.text(doc, "", "root"),
                 distribution=f.text(doc, "", "distribution", required=False, limit=256),
                 installed_version=f.text(doc, "", "installed_version", required=False, limit=256),
                 detail=f.text(doc, "", "detail", required=False) or "")


def _read(path: Path) -> bytes:
    try:
        return read_own_file(path, limit=HISTORY_LIMIT, owned=True) or b""
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read the history: {exc.strerror}",
                           hint="fix its permissions (the user running hotfix must read it)") from None


def read_history(tdir: TargetDir) -> list[Entry]:
    """Every entry of the target, oldest first (the rotated file, then the current one)."""
    entries = []
    for path in (tdir.history_rotated, tdir.history_file):
        for number, line in enumerate(_read(path).splitlines(), 1):
            if line.strip():
                entries.append(parse_line(line, f"{path}:{number}"))
    return entries


def appended(tdir: TargetDir, *entries: Entry) -> list[tuple[Path, bytes]]:
    """The history files as they must be with ``entries`` added (a group apply logs one per hotfix): (path,
    whole new bytes), for the transaction to write with the files (the current file's old lines are kept as
    they are: a broken one is named when read, never lost when appended to)."""
    line = b"".join(entry.to_line() for entry in entries)
    old = _read(tdir.history_file)
    if old and not old.endswith(b"\n"):
        old += b"\n"
    if old and len(old) + len(line) > HISTORY_CAP:
        return [(tdir.history_rotated, old), (tdir.history_file, line)]
    return [(tdir.history_file, old + line)]


def as_before(written: list[tuple[Path, bytes]]) -> list[tuple[Path, bytes]]:
    """The files ``appended`` would write, with the bytes they hold now (empty when absent): what a
    transaction that is undone after its commit (a failed post-apply check) writes back."""
    return [(path, _read(path)) for path, _ in written]
