"""`hotfix log` and `hotfix status --all` (issue 24 item 11) on real vLLM 0.30.0 installs: the history line
of every change (apply, upgrade-free series, adopt, rollback), written inside the transaction; nothing for
a dry run, a no-op or an apply a failed post-check undid; broken history files named (exit 8); rotation;
every recorded target of the state directory with its series, stale ones marked."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from fixtures.series import MAMBA, MAMBA_ID, mamba_diff, series_catalog, write_catalog
from vllm_hotfix_guard.paths import TargetDir

pytestmark = pytest.mark.real

REPO = Path(__file__).resolve().parents[2]
TOP = "pr77-postprocess"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return series_catalog(tmp_path_factory)


def log_json(run_hotfix, *args) -> list[dict]:
    done = run_hotfix("log", *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_change_is_one_line_with_who_what_when_and_the_fingerprint_status_prints(
        vllm_install, run_hotfix, catalog, tmp_path):
    venv = vllm_install("0.30.0")
    options = ("--python", str(venv.python), "--catalog", str(catalog))
    assert run_hotfix("apply", MAMBA_ID, *options, "--dry-run").returncode == 0  # a dry run logs nothing
    assert log_json(run_hotfix, *options) == [{"root": str(venv.site_packages), "entries": []}]

    steps = [("apply", MAMBA_ID), ("apply", TOP), ("apply", TOP), ("rollback", MAMBA_ID)]  # the 3rd: a no-op
    prints = []
    for command, hotfix_id in steps:
        assert run_hotfix(command, hotfix_id, *options).returncode == 0
        prints.append(json.loads(run_hotfix("status", *options, "--json").stdout)[0]["fingerprint"])
    (found,) = log_json(run_hotfix, *options)
    entries = found["entries"]
    assert [(e["outcome"], e["hotfix"], e["series"]) for e in entries] == [
        ("applied", MAMBA_ID, [MAMBA_ID]), ("applied", TOP, [MAMBA_ID, TOP]), ("rolled-back", MAMBA_ID, [TOP])]
    assert [e["fingerprint"] for e in entries] == [prints[0], prints[1], prints[3]]  # what status says after each
    first = entries[0]
    assert first["command"] == f"hotfix apply {MAMBA_ID} --python {venv.python} --catalog {catalog}"
    assert (first["user"], first["uid"], first["host"]) == ("root" if os.geteuid() == 0 else first["user"],
                                                            os.geteuid(), os.uname().nodename)
    assert (first["version"], first["files"], first["distribution"], first["installed_version"]) == (1, 1, "vllm", "0.30.0")
    assert first["root"] == str(venv.site_packages) and first["time"].endswith("Z")
    assert entries[2]["detail"] == f"re-derived without it: {TOP}"

    text = run_hotfix("log", *options)
    lines = text.stdout.splitlines()
    assert lines[0] == f"== {venv.site_packages}"
    assert lines[1].startswith(first["time"] + "  ") and f"  applied     {MAMBA_ID}@1  {prints[0]}  series: {MAMBA_ID}" in lines[1]
    assert lines[2] == f"    $ hotfix apply {MAMBA_ID} --python {venv.python} --catalog {catalog}"
    only = log_json(run_hotfix, TOP, *options)[0]["entries"]
    assert [e["hotfix"] for e in only] == [TOP]
    assert [e["hotfix"] for e in log_json(run_hotfix, "--all")[0]["entries"]] == [MAMBA_ID, TOP, MAMBA_ID]


def test_an_adopted_apply_is_logged_and_an_undone_one_is_not(vllm_install, run_hotfix, tmp_path):
    """Adopting what was applied by hand changes no file: one line all the same (the record changed). A
    post-apply check that fails undoes files, record AND history: no line for what did not happen."""
    venv = vllm_install("0.30.0")
    patch = mamba_diff(REPO)
    failing = write_catalog(tmp_path / "failing", {"checked-fix": (patch, '[[checks]]\nfile = "%s"\ncontains = '
                                                                         '"NOT IN THE PATCHED FILE"\n' % MAMBA)})
    options = ("--python", str(venv.python))
    before = (venv.site_packages / MAMBA).read_bytes()
    refused = run_hotfix("apply", "checked-fix", *options, "--catalog", failing)
    assert refused.returncode == 3 and "post-apply check failed" in refused.stderr, refused.stderr
    assert (venv.site_packages / MAMBA).read_bytes() == before
    tdir = TargetDir.of(venv.site_packages)
    assert tdir.history_file.read_bytes() == b"" and not tdir.history_rotated.exists()
    assert log_json(run_hotfix, *options)[0]["entries"] == []

    shutil.copyfile(tmp_path / "failing" / "patches" / "checked-fix" / "0.30.patch", tmp_path / "fix.patch")
    import subprocess

    subprocess.run(["patch", "-p1", "-s", "-i", str(tmp_path / "fix.patch")], cwd=venv.site_packages, check=True)
    assert run_hotfix("apply", MAMBA_ID, *options).returncode == 0  # applied by hand: adopted, no file changed
    (entry,) = log_json(run_hotfix, *options)[0]["entries"]
    assert (entry["outcome"], entry["hotfix"], entry["files"]) == ("adopted", MAMBA_ID, 0)


def test_a_broken_history_is_named_exit_8_and_never_a_traceback(vllm_install, run_hotfix, tmp_path):
    venv = vllm_install("0.30.0")
    options = ("--python", str(venv.python))
    assert run_hotfix("apply", MAMBA_ID, *options).returncode == 0
    tdir = TargetDir.of(venv.site_packages)
    good = tdir.history_file.read_bytes()
    cases = {
        "not json": good + b"{oops\n",
        "bad outcome": good + good.replace(b'"outcome":"applied"', b'"outcome":"deleted-everything"'),
        "control character": good + good.replace(b'"command":"hotfix', b'"command":"\\u001b[2Jhotfix'),
    }
    for why, data in cases.items():
        tdir.history_file.write_bytes(data)
        done = run_hotfix("log", *options)
        assert done.returncode == 8, (why, done.stderr)
        assert done.stderr.startswith(f"hotfix: error: {tdir.history_file}:2"), (why, done.stderr)
        assert "Traceback" not in done.stderr
        assert json.loads(run_hotfix("log", *options, "--json").stdout)["error"]["exit_code"] == 8
    tdir.history_file.unlink()
    os.symlink(tmp_path / "elsewhere.jsonl", tdir.history_file)
    (tmp_path / "elsewhere.jsonl").write_bytes(good)
    done = run_hotfix("log", *options)
    assert done.returncode == 8 and "is a symbolic link" in done.stderr
    applied = run_hotfix("rollback", MAMBA_ID, *options)  # a planted link steers no write either
    assert applied.returncode == 8 and "is a symbolic link" in applied.stderr
    assert (tmp_path / "elsewhere.jsonl").read_bytes() == good


def test_a_full_history_rotates_in_the_same_transaction(vllm_install, run_hotfix):
    from vllm_hotfix.txn import history

    venv = vllm_install("0.30.0")
    options = ("--python", str(venv.python))
    assert run_hotfix("apply", MAMBA_ID, *options).returncode == 0
    tdir = TargetDir.of(venv.site_packages)
    line = tdir.history_file.read_bytes()
    tdir.history_file.write_bytes(line * (history.HISTORY_CAP // len(line)))  # full: the next line rotates it
    full = tdir.history_file.read_bytes()
    assert run_hotfix("rollback", MAMBA_ID, *options).returncode == 0
    assert tdir.history_rotated.read_bytes() == full
    (entry,) = [json.loads(x) for x in tdir.history_file.read_bytes().splitlines()]
    assert entry["outcome"] == "rolled-back"
    entries = log_json(run_hotfix, *options)[0]["entries"]
    assert len(entries) == full.count(b"\n") + 1 and entries[-1]["outcome"] == "rolled-back"


def test_status_all_lists_every_target_with_its_series_and_marks_the_gone_ones(vllm_install, run_hotfix, catalog,
                                                                              tmp_path):
    first = vllm_install("0.30.0")
    options = ("--catalog", str(catalog))
    assert run_hotfix("apply", MAMBA_ID, "--python", first.python, *options).returncode == 0
    assert run_hotfix("apply", TOP, "--python", first.python, *options).returncode == 0
    checkout = tmp_path / "gone-src"
    (checkout / "vllm").mkdir(parents=True)
    (checkout / "vllm" / "__init__.py").write_text("")
    (checkout / "vllm" / "a.py").write_text("line 1\nline 2\n")
    (tmp_path / "local.diff").write_text("--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1,2 +1,2 @@\n line 1\n-line 2\n+line two\n")
    assert run_hotfix("apply", "--patch", tmp_path / "local.diff", "--root", checkout).returncode == 0
    shutil.rmtree(checkout)

    done = run_hotfix("status", "--all", *options)
    assert done.returncode == 0, done.stdout + done.stderr
    text = done.stdout
    assert f"{first.site_packages}  vllm 0.30.0 (wheel, {first.python})\n" in text
    assert f"  ok  1. {MAMBA_ID:<22} applied        @1\n" in text and f"  ok  2. {TOP:<22} applied        @1\n" in text
    assert f"{checkout}  vllm (directory)  STALE: the target is gone (first seen missing now" in text
    assert f"  --  1. {'local':<22} recorded\n" in text
    assert text.splitlines()[-1].startswith("2 target(s) in ") and "1 stale" in text.splitlines()[-1]
    doc = json.loads(run_hotfix("status", "--all", *options, "--json").stdout)
    by_root = {t["root"]: t for t in doc["targets"]}
    live, gone = by_root[str(first.site_packages)], by_root[str(checkout)]
    assert (live["state"], live["stale"], live["series"]) == ("live", False, [MAMBA_ID, TOP])
    assert [(h["id"], h["state"], h["series"]) for h in live["hotfixes"]] == [(MAMBA_ID, "applied", 1), (TOP, "applied", 2)]
    status = json.loads(run_hotfix("status", "--python", first.python, *options, "--json").stdout)
    assert live["fingerprint"] == status[0]["fingerprint"]
    assert (gone["state"], gone["stale"], gone["series"], gone["hotfixes"]) == ("gone", True, ["local"], [])

    (first.site_packages / MAMBA).write_bytes((first.site_packages / MAMBA).read_bytes() + b"# edited\n")
    drifted = run_hotfix("status", "--all", *options)
    assert drifted.returncode == 1 and f"!!  1. {MAMBA_ID}" in drifted.stdout
    assert run_hotfix("status", "--all", "--python", first.python).returncode == 2
