"""Several hotfixes on one real vLLM 0.30.0 install form a series (quilt's model): each goes on top of
the ones before it, each keeps its own word, and a rollback anywhere takes out exactly its hunks.

The built-in mamba-align-block-size plus a test catalog (tests/fixtures/series.py) made with a real
`diff` from the install's own files: another hunk of the same mamba_hybrid.py, a hunk of states.py,
the same change under another id, a change of the same line, one ordered on top, one in conflict.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

import realdata
from fixtures.series import MAMBA, MAMBA_ID, STATES, make_series_catalog

pytestmark = [pytest.mark.real, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    template = realdata.vllm_template("0.30.0")
    return make_series_catalog(template.site_packages, tmp_path_factory.mktemp("series"), REPO)


@pytest.fixture
def target(vllm_install, catalog, run_hotfix):
    venv = vllm_install("0.30.0")
    options = ("--python", str(venv.python), "--catalog", str(catalog))

    def hotfix(*args, code: int | None = 0):
        done = run_hotfix(*args, *options)
        if code is not None:
            assert done.returncode == code, (args, done.stdout, done.stderr)
        return done

    return venv, hotfix


def statuses(hotfix) -> list[tuple[str, str]]:
    done = hotfix("status", "--json", code=None)
    return [(s["id"], s["state"]) for s in json.loads(done.stdout) if s["recorded"]]


def git_applied(pristine: bytes, *diffs: bytes, tmp: Path) -> bytes:
    """The oracle: ``pristine`` with ``diffs`` applied in order by `git apply` (paths of mamba_hybrid.py)."""
    work = tmp / "oracle"
    (work / MAMBA).parent.mkdir(parents=True, exist_ok=True)
    (work / MAMBA).write_bytes(pristine)
    for diff in diffs:
        subprocess.run(["git", "apply", "--include", MAMBA, "-"], cwd=work, input=diff, check=True, capture_output=True)
    return (work / MAMBA).read_bytes()


def test_three_in_order_then_rolled_back_from_the_middle_and_the_bottom(target, catalog, run_hotfix, tmp_path):
    venv, hotfix = target
    sp = venv.site_packages
    pristine = {rel: (sp / rel).read_bytes() for rel in (MAMBA, STATES)}
    hotfix("apply", MAMBA_ID)
    hotfix("apply", "pr77-postprocess")  # another hunk of the same file: on top of mamba
    hotfix("apply", "states-note")
    assert statuses(hotfix) == [(MAMBA_ID, "applied"), ("pr77-postprocess", "applied"), ("states-note", "applied")]
    text = hotfix("status", code=0).stdout
    assert text.index(MAMBA_ID) < text.index("pr77-postprocess") < text.index("states-note")
    (mamba,) = [s for s in json.loads(hotfix("status", MAMBA_ID, "--json").stdout)]
    assert mamba["files"][0]["under"] == ["pr77-postprocess"]
    hotfix("verify")

    mamba_diff = (REPO / "patches" / MAMBA_ID / "0.27.patch").read_bytes()
    pr77 = (catalog / "patches" / "pr77-postprocess" / "0.30.patch").read_bytes()
    assert (sp / MAMBA).read_bytes() == git_applied(pristine[MAMBA], mamba_diff, pr77, tmp=tmp_path / "all")

    done = hotfix("rollback", "pr77-postprocess")  # the middle one: only its hunk goes
    assert statuses(hotfix) == [(MAMBA_ID, "applied"), ("states-note", "applied")]
    assert (sp / MAMBA).read_bytes() == git_applied(pristine[MAMBA], mamba_diff, tmp=tmp_path / "first")
    assert (sp / STATES).read_bytes() != pristine[STATES]
    hotfix("verify")

    hotfix("apply", "pr77-postprocess")  # on top again: the series is mamba, states-note, pr77-postprocess
    done = hotfix("rollback", MAMBA_ID)  # the bottom one, under pr77-postprocess: its hunks reversed in place
    assert statuses(hotfix) == [("states-note", "applied"), ("pr77-postprocess", "applied")]
    assert (sp / MAMBA).read_bytes() == git_applied(pristine[MAMBA], pr77, tmp=tmp_path / "pr77")
    assert "by reversing its hunks under pr77-postprocess" in done.stdout  # and whose record was re-derived
    assert "pr77-postprocess stays applied: its record was re-derived" in done.stdout
    hotfix("verify")
    hotfix("apply", MAMBA_ID)  # and back on top
    assert statuses(hotfix)[-1] == (MAMBA_ID, "applied")

    for hotfix_id in (MAMBA_ID, "states-note", "pr77-postprocess"):
        hotfix("rollback", hotfix_id)
    assert {rel: (sp / rel).read_bytes() for rel in pristine} == pristine
    audit = run_hotfix("audit", "vllm", "--python", venv.python)
    assert audit.returncode == 0, audit.stdout


def test_the_same_change_under_another_id_is_not_recorded_and_cannot_revert_it(target):
    venv, hotfix = target
    hotfix("apply", MAMBA_ID)
    done = hotfix("apply", "same-change")
    assert "already in effect as part of what the recorded series (mamba-align-block-size) put in" in done.stdout
    assert statuses(hotfix) == [(MAMBA_ID, "applied")]
    (same,) = json.loads(hotfix("status", "same-change", "--json").stdout)
    assert same["state"] == "applied" and "part of what the recorded series (mamba-align-block-size)" in same["detail"]
    done = hotfix("rollback", "same-change", code=3)  # never silently reverts the file under mamba
    assert MAMBA_ID in done.stderr
    assert statuses(hotfix) == [(MAMBA_ID, "applied")]


def test_hunks_that_meet_are_refused_naming_both_unless_ordered(target, run_hotfix):
    venv, hotfix = target
    sp = venv.site_packages
    hotfix("apply", MAMBA_ID)
    before = (sp / MAMBA).read_bytes()
    done = hotfix("apply", "divisor-rewrite", code=None)
    assert done.returncode in (3, 4), done.stderr
    assert "divisor-rewrite" in done.stderr and MAMBA_ID in done.stderr
    assert (sp / MAMBA).read_bytes() == before
    hotfix("apply", "divisor-on-top")  # its manifest says after = ["mamba-align-block-size"]
    assert statuses(hotfix) == [(MAMBA_ID, "applied"), ("divisor-on-top", "applied")]
    done = hotfix("rollback", MAMBA_ID, code=3)  # the one on top was written against its lines
    assert "divisor-on-top" in done.stderr
    assert statuses(hotfix) == [(MAMBA_ID, "applied"), ("divisor-on-top", "applied")]
    first = re.findall(r"`([^`]+)`", done.stderr.split("hint:", 1)[1])  # the rollback to run first, as pasted
    assert first == [f"hotfix rollback divisor-on-top --python {venv.python}"], done.stderr
    pasted = run_hotfix(*shlex.split(first[0])[1:])
    assert pasted.returncode == 0, pasted.stderr
    hotfix("rollback", MAMBA_ID)


def test_declared_conflicts_are_refused(target):
    venv, hotfix = target
    hotfix("apply", MAMBA_ID)
    done = hotfix("apply", "never-with-mamba", code=3)
    assert "never-with-mamba conflicts with mamba-align-block-size" in done.stderr
    assert statuses(hotfix) == [(MAMBA_ID, "applied")]


def test_a_rebuild_loses_every_one_and_apply_in_order_brings_them_back(target):
    venv, hotfix = target
    for hotfix_id in (MAMBA_ID, "pr77-postprocess", "states-note"):
        hotfix("apply", hotfix_id)
    realdata.pip_install(venv, "--force-reinstall", str(realdata.vllm_wheel("0.30.0")))
    assert statuses(hotfix) == [(MAMBA_ID, "lost"), ("pr77-postprocess", "lost"), ("states-note", "lost")]
    hotfix("verify", code=1)
    done = hotfix("apply", "pr77-postprocess", code=3)  # it was applied on mamba's bytes: mamba first
    assert "hotfix apply mamba-align-block-size" in done.stderr
    for hotfix_id in (MAMBA_ID, "pr77-postprocess", "states-note"):
        hotfix("apply", hotfix_id)
    assert statuses(hotfix) == [(MAMBA_ID, "applied"), ("pr77-postprocess", "applied"), ("states-note", "applied")]
    hotfix("verify")
