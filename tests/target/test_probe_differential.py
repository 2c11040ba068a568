"""The probe's facts decide what they decided before issue 25 made its distribution scan cheap.

The oracle is the probe as it was (tests/fixtures/probe_before_issue25.py, frozen), run in the same
interpreter on the same sys.path: for every top-level name importlib.metadata knows there (and a few
that are not installed), ``install_facts`` -- what the guard gathers in every vLLM process and
install/facts.decide turns into root, kind, distribution and version -- and the probe's whole facts
must be equal, field for field, except the distributions: the scan now stops at the one decide
chooses (install/probe._distributions), so decide must give the same answer from both.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_hotfix_guard.install import probe

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

DIFFERENTIAL = r'''
import importlib.metadata, importlib.util, sys
here, fixtures = sys.argv[1], sys.argv[2]
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
new = load("probe_now", here + "/probe.py")
old = load("probe_before", fixtures + "/probe_before_issue25.py")
path = list(sys.path)
sys.path.append(here + "/../..")  # facts.py imports its sibling modules from the guard package (stdlib only)
facts = load("facts_now", here + "/facts.py")
names = sorted(importlib.metadata.packages_distributions()) + ["vllm", "torch", "not_installed_xyz", "json"]
checked, differ, decided = 0, [], 0
for name in names:
    if name.startswith("__") or not name.isidentifier():
        continue
    a, b = old.install_facts(name, path), new.install_facts(name, path)
    checked += 1
    if {k: v for k, v in a.items() if k != "distributions"} != {k: v for k, v in b.items() if k != "distributions"}:
        differ.append((name, a, b))
        continue
    try:
        one, two = facts.decide(a), facts.decide(b)
    except facts.NotImportable:
        continue
    decided += 1
    if (one.kind, one.root, one.dist, one.dist_info) != (two.kind, two.root, two.dist, two.dist_info):
        differ.append((name, "decide", one.kind, str(one.root), one.dist, two.kind, str(two.root), two.dist))
old_all, new_all = old._facts("vllm", path, False), new._facts("vllm", path, False)
old_all.pop("distributions"), new_all.pop("distributions")
if set(new_all) - set(old_all) - {"guard"}:  # "guard": asked for by --guard only (None here), added since
    differ.append(("new fields", sorted(set(new_all) - set(old_all))))
new_all = {key: value for key, value in new_all.items() if key in old_all}
if old_all != new_all:
    differ.append(("whole facts of vllm", old_all, new_all))
print(repr((checked, decided, differ)))
'''


def _differential(python: str) -> tuple[int, int, list]:
    done = subprocess.run([python, "-c", DIFFERENTIAL, str(Path(probe.__file__).parent), str(FIXTURES)],
                          capture_output=True, text=True, check=True)
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


def test_the_facts_are_the_ones_before_here():
    """This interpreter: the test venv (vllm-hotfix editable, ~50 wheels with and without top_level.txt)."""
    checked, decided, differ = _differential(sys.executable)
    assert checked > 20 and decided > 20 and differ == []


@pytest.mark.real
def test_the_facts_are_the_ones_before_on_a_real_vllm_install(vllm_template):
    checked, decided, differ = _differential(str(vllm_template("0.30.0").python))
    assert checked >= 1 and differ == []


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.vllm_full
def test_the_facts_are_the_ones_before_in_the_full_vllm_venv():
    """The real vLLM 0.30.0 with torch and ~200 distributions: what the guard scans in every vLLM process."""
    import realdata

    checked, decided, differ = _differential(str(realdata.vllm_full_venv("0.30.0").python))
    assert checked > 150 and decided > 150 and differ == []
