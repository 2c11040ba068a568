"""Issue 31, the `re` fallback (no google-re2 wheel): catalog.linear.linear_time_problem refuses every
ambiguous nested repetition, more than one wide repeat that overlaps what follows it and (issue 45) narrow
optional repeats whose splits multiply past a budget ('x?' * n + 'x' * n), on every
platform (exit 8 when the catalog loads); the built-in catalog's patterns, matched by `re` on crafted
lines cut at 8 KB, finish. Each run is a subprocess with a timeout: a hang fails, no time is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from test_manifest import manifest_data, write_manifest

REFUSED = {  # the three, and their family
    r"ERROR (x|x)*y": "alternatives that can begin alike",
    r"ERROR (x|xx)+y": "alternatives that can begin alike",
    r"ERROR (.*a){12}": "a repetition of varying count inside another repetition",
    r"ERROR (a|ab)*c": "alternatives that can begin alike",
    r"ERROR (\w+\s?)+x": "a repetition of varying count inside another repetition",
    r"ERROR (?:a?b?)*c": "a repetition of something that can match nothing",
    r"ERROR ((ab)*)+c": "a repetition of something that can match nothing",
    r"ERROR abc.*a.*a.*b": "more than one wide repeat",
    r"ERROR \w+\s?\w+x": "more than one wide repeat",
    r"ERROR [^,]*,?[^,]*x": "more than one wide repeat",
    "ERROR " + "x?" * 28 + "x" * 28: "optional or bounded repeats",  # issue 45: 22.6 s under re at n = 28
    "ERROR " + "x?" * 9 + "x" * 9: "optional or bounded repeats",
    r"ERROR a{0,20}a{0,20}a{0,20}b": "optional or bounded repeats",
}
ALLOWED = ["ERROR " + "x?" * 8 + "x" * 8, r"ERROR a{0,50}b?a", r"ERROR (?:ab|cd)+x", r"ERROR (a|b)*c", r"ERROR a.*b", r"ERROR [^)]*\) .*done",
           r"ERROR \d+ tokens", r"NVRM: Xid \(PCI:[^)]*\): 31\b.*MMU Fault.*ACCESS_TYPE_VIRT_READ"]


def _doctor(tmp_path, pattern: str | None, text: str, *, fallback: bool = True) -> subprocess.CompletedProcess:
    """`hotfix doctor` on a log of ``text``, with ``pattern`` in a user catalog and, with ``fallback``,
    Python's `re` instead of google-re2 (as on a platform without its wheel)."""
    args = []
    if pattern is not None:
        catalog = tmp_path / "catalog"
        write_manifest(catalog, manifest_data(id="hostile", signatures=[
            {"pattern": pattern, "role": "first-error", "explain": "x"}]), name="hostile")
        args = ["--catalog", str(catalog)]
    log = tmp_path / "hostile.log"
    log.write_text(text)
    code = ("import sys\nfrom vllm_hotfix.catalog import signatures\n"
            + ("signatures._re2_compile = None\n" if fallback else "")
            + "from vllm_hotfix.cli import main\nmain(sys.argv[1:])\n")
    env = {**os.environ, "HOTFIX_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run([sys.executable, "-c", code, "doctor", str(log), "--json", *args], capture_output=True,
                          text=True, timeout=300, env=env)


@pytest.mark.slow
@pytest.mark.parametrize("pattern", REFUSED)
@pytest.mark.parametrize("fallback", [True, False], ids=["re", "re2"])
def test_an_ambiguous_repetition_is_refused_at_load_whichever_engine(tmp_path, pattern, fallback):
    line = "ERROR " + "x" * 30 + "!\n"  # 37 characters: enough to hang `re` on (x|x)*y
    done = _doctor(tmp_path, pattern, line, fallback=fallback)
    assert done.returncode == 8, done.stderr
    assert f"hostile.toml: signatures[0].pattern: {REFUSED[pattern]}" in done.stderr
    assert json.loads(done.stdout)["error"]["exit_code"] == 8  # --json says so too


@pytest.mark.parametrize("pattern", ALLOWED)
def test_what_the_lint_allows_finishes_on_crafted_8kb_lines_under_re(tmp_path, pattern):
    from vllm_hotfix.catalog.signatures import literal_runs

    unit = " ".join(literal_runs(pattern)) + " x "
    lines = ["ERROR " + "x" * 9000, "ERROR " + "ab" * 4500, "ERROR " + unit * (9000 // len(unit))]
    done = _doctor(tmp_path, pattern, "\n".join(lines) + "\n")
    assert done.returncode in (0, 1, 9), done.stderr
    assert json.loads(done.stdout)["long_lines"] == 3


def test_the_built_in_catalog_under_re_on_lines_built_from_its_own_literals(tmp_path):
    from vllm_hotfix.catalog.index import Catalog
    from vllm_hotfix.catalog.linear import linear_time_problem
    from vllm_hotfix.catalog.signatures import literal_runs

    patterns = [s.pattern for m in Catalog.load().latest() for s in m.signatures]
    assert patterns and all(linear_time_problem(p) is None for p in patterns)
    lines = []
    for pattern in patterns:
        unit = " ".join(literal_runs(pattern)) + " "
        lines.append("ERROR " + unit * (8192 // len(unit) + 1))
    done = _doctor(tmp_path, None, "\n".join(lines) + "\n")
    assert done.returncode in (0, 1, 9), done.stderr
    assert json.loads(done.stdout)["lines"] == len(lines)
