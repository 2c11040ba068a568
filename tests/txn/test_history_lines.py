"""txn/history.py and the journal's records (fast): lines validated, appending and rotating, the history
restored with the files by a failed commit and by recovery; a schema-1 journal (one "record") still
recovers; a journal naming a file outside the state folder steers nothing."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from vllm_hotfix_guard.core.hunk_apply import FileEdit, Plan
from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix_guard.paths import TargetDir
from vllm_hotfix.txn import history, journal
from vllm_hotfix.txn.recovery import read_journal, recover


def entry(**changes) -> history.Entry:
    fields = dict(time="2026-12-01T10:00:00Z", user="root", uid=0, sudo_user=None, host="node-1", pid=42,
                  command="hotfix apply fix-a --python /opt/venv/bin/python", outcome="applied", hotfix="fix-a",
                  version=1, fingerprint="hf1-0123456789abcdef", series=("fix-a",), files=1, root="/opt/site",
                  distribution="vllm", installed_version="0.30.0")
    fields.update(changes)
    return history.Entry(**fields)


@pytest.fixture
def tdir(tmp_path, monkeypatch):
    monkeypatch.setenv("HOTFIX_STATE_DIR", str(tmp_path / "state"))
    target = TargetDir.of(tmp_path / "site")
    target.directory.mkdir(parents=True)
    return target


def test_a_line_round_trips_and_every_field_is_checked():
    line = entry(sudo_user="alice", detail="dropped x").to_line()
    assert line.endswith(b"\n") and b"\n" not in line[:-1]
    assert history.parse_line(line, "h:1") == entry(sudo_user="alice", detail="dropped x")
    doc = json.loads(line)
    for key, value, why in [("outcome", "deleted", "expected one of applied"), ("fingerprint", "x", "not a fingerprint"),
                            ("hotfix", "../x", "not a hotfix id"), ("uid", "0", "expected int"),
                            ("series", ["ok", "BAD ID"], "not a hotfix id"), ("command", "a\x1b[2Jb", "control character"),
                            ("time", None, "missing")]:
        broken = dict(doc, **{key: value})
        with pytest.raises(InvalidInput, match=why) as failed:
            history.parse_line(json.dumps(broken).encode(), "h:7")
        assert failed.value.message.startswith("h:7: ")


def test_appending_keeps_old_lines_as_they_are_and_rotates_before_the_cap(tdir):
    assert history.appended(tdir, entry()) == [(tdir.history_file, entry().to_line())]
    tdir.history_file.write_bytes(b'{"a broken line without newline"')
    ((path, data),) = history.appended(tdir, entry())
    assert data == b'{"a broken line without newline"\n' + entry().to_line()  # kept; `log` names it
    full = entry().to_line() * (history.HISTORY_CAP // len(entry().to_line()))
    tdir.history_file.write_bytes(full)
    assert history.appended(tdir, entry(hotfix="fix-b")) == [(tdir.history_rotated, full),
                                                             (tdir.history_file, entry(hotfix="fix-b").to_line())]
    tdir.history_file.write_bytes(entry().to_line())
    tdir.history_rotated.write_bytes(entry(hotfix="old").to_line())
    assert [e.hotfix for e in history.read_history(tdir)] == ["old", "fix-a"]
    assert history.as_before([(tdir.history_file, b"x"), (tdir.directory / "absent.jsonl", b"y")]) == [
        (tdir.history_file, entry().to_line()), (tdir.directory / "absent.jsonl", b"")]


def test_a_failed_commit_gives_the_history_back_with_the_files(tdir, tmp_path, monkeypatch):
    root = tmp_path / "site"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "m.py").write_bytes(b"a\n")
    tdir.history_file.write_bytes(entry().to_line())
    before = tdir.history_file.read_bytes()
    plan = Plan((FileEdit("pkg/m.py", "modify", None, b"a\n", b"b\n", None, None, ()),), False)
    real = journal.os.unlink

    def fail_at_the_commit_point(path, *args, **kw):
        if str(path).endswith("journal.json"):
            raise OSError(28, "No space left on device", str(path))
        return real(path, *args, **kw)

    monkeypatch.setattr(journal.os, "unlink", fail_at_the_commit_point)
    with pytest.raises(Exception, match="No space left"):
        journal.commit(root, plan, journal_dir=tdir.journal, also=history.appended(tdir, entry(hotfix="fix-b")))
    assert tdir.history_file.read_bytes() == before and (root / "pkg" / "m.py").read_bytes() == b"a\n"


def test_a_schema_1_journal_still_recovers_and_a_record_outside_the_state_folder_steers_nothing(tdir, tmp_path):
    root = tmp_path / "site"
    root.mkdir(exist_ok=True)
    old, new = b'{"old": 1}\n', b'{"new": 2}\n'
    tdir.state_file.write_bytes(new)
    (tdir.journal / "backups").mkdir(parents=True)
    (tdir.journal / "backups" / "record").write_bytes(old)
    doc = {"schema": 1, "root": str(root), "tag": "1-0123abcd", "created_dirs": [], "files": [],
           "record": {"path": str(tdir.state_file), "backup": "backups/record",
                      "before_sha256": hashlib.sha256(old).hexdigest(), "after_sha256": hashlib.sha256(new).hexdigest()}}
    (tdir.journal / "journal.json").write_text(json.dumps(doc))
    assert recover(tdir.journal, root) is not None
    assert tdir.state_file.read_bytes() == old and not (tdir.journal / "journal.json").exists()

    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me\n")
    doc = dict(doc, schema=2, records=[dict(doc["record"], path=str(victim))])
    del doc["record"]
    (tdir.journal / "backups").mkdir(exist_ok=True)
    (tdir.journal / "backups" / "record").write_bytes(old)
    (tdir.journal / "journal.json").write_text(json.dumps(doc))
    with pytest.raises(InvalidInput, match=r"records\[0\]\.path: .* is not this target's state.json or "
                                           r"history.jsonl or history.1.jsonl"):
        read_journal(tdir.journal, root)
    with pytest.raises(InvalidInput):
        recover(tdir.journal, root)
    assert victim.read_bytes() == b"keep me\n"
    assert os.path.exists(tdir.journal / "journal.json")  # kept: it is for a person to look at
