"""Catalog truth for vllm-ascend: every built-in vllm-ascend hotfix on the real releases of its range, as pip
installs them (the index's wheel, or for an sdist-only release a wheel built from the real sdist by its own
setup.py without CANN): `not-applied` -> apply -> `applied` -> rollback -> pristine (pip's RECORD), all of a
release's hotfixes as one series (`verify` of the GLM series: tests/test_ascend_real.py);
on the release that ships the fix (`fixed_in`'s lowest release): `fixed-upstream`, and the content is really
there (the series' reverse applies to that release's files); on the later parallel lines, `fixed_in`'s union
is the content's truth (contained there, and only there), and outside it and the range `status` says
`not-applicable`, not `fixed-upstream`. Artifacts are downloaded once (~/.cache/vllm-hotfix); one
private install per release, shared by its tests."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from packaging.version import Version

import realdata
from vllm_hotfix.catalog.index import Catalog
from vllm_hotfix.catalog.upstream import open_release
from vllm_hotfix.core.presence import APPLICABLE, CONTAINED, presence
from vllm_hotfix.flow.applicability import release_target
from vllm_hotfix.flow.hotfix import catalog_hotfix

pytestmark = [pytest.mark.real, pytest.mark.slow]

ASCEND = "vllm-ascend"
# Releases the index has for vllm-ascend (2026-12-07); a range is judged on these.
PUBLISHED = ["0.23.0rc1", "0.23.0", "0.23.0.post1", "0.24.0rc1", "0.25.1rc1", "0.26.0rc1", "0.29.0rc1",
             "0.30.0rc1", "0.30.0rc2"]


def _hotfixes():
    """The built-in vllm-ascend hotfixes the index's releases can judge: (manifest, spec)."""
    found = []
    for manifest in Catalog.load().latest():  # no --catalog / HOTFIX_CATALOG here: the built-in catalog
        if manifest.kind == "advisory":
            continue
        for spec in manifest.targets:
            if spec.distribution == ASCEND and spec.git is None:
                found.append((manifest, spec))
    return found


HOTFIXES = _hotfixes()
IN_RANGE: dict[str, list] = defaultdict(list)
FIXED: dict[str, list] = defaultdict(list)
for _manifest, _spec in HOTFIXES:
    for _release in PUBLISHED:
        if _spec.contains(_release) and not _manifest.is_fixed_in(_release):
            IN_RANGE[_release].append(_manifest)
    if _manifest.fixed_in is not None and _manifest.fixed_in.first:
        FIXED[_manifest.fixed_in.first].append((_manifest, _spec))


def test_the_catalog_carries_real_vllm_ascend_backports():
    ids = {m.id for m, _ in HOTFIXES}
    backports = [m for m, _ in HOTFIXES if m.fixed_in is not None]
    assert {"glm-conv-null-slot", "glm-conv-null-slot-zero-row"} <= ids and len(backports) >= 10
    assert all(any(r.kind == "pr" and "vllm-ascend/pull/" in r.url for r in m.references) for m in backports)
    assert all(m.fixed_in.first in PUBLISHED for m in backports)
    assert len(list(Catalog.load().latest())) >= 13 + 4  # 13+ hotfixes, plus the 4 advisories


@pytest.fixture(scope="module")
def installs(tmp_path_factory):
    made: dict[str, realdata.Venv] = {}

    def get(release: str) -> realdata.Venv:
        if release not in made:
            made[release] = realdata.copy_venv(realdata.ascend_template(release),
                                               tmp_path_factory.mktemp("ascend") / release)
        return made[release]
    return get


def _states(run_hotfix, python) -> dict[str, str]:
    done = run_hotfix("status", "--python", python, "--json")
    assert done.returncode in (0, 1), done.stderr
    return {e["id"]: e["state"] for e in json.loads(done.stdout)}


def _series_order(manifests: list) -> list:
    """The hotfixes in an order where each comes after the ones its ``after`` names."""
    done: list = []
    pending = list(manifests)
    while pending:
        ready = [m for m in pending if all(a in {d.id for d in done} or a not in {p.id for p in pending}
                                           for a in m.after)]
        done += ready
        pending = [m for m in pending if m not in ready]
    return done


@pytest.mark.parametrize("release", sorted(IN_RANGE, key=Version))
def test_every_hotfix_of_a_release_applies_in_series_and_rolls_back_to_pristine(run_hotfix, installs, release):
    """All of a release's hotfixes go on as one series (as a deployment carries them), each judged alone by
    `status` before and after; rolled back in reverse order, the install is pristine again (pip's RECORD)."""
    python = str(installs(release).python)
    hotfixes = _series_order(IN_RANGE[release])
    before = _states(run_hotfix, python)
    assert {m.id: before[m.id] for m in hotfixes} == {m.id: "not-applied" for m in hotfixes}
    for manifest in hotfixes:
        done = run_hotfix("apply", manifest.id, "--python", python)
        assert done.returncode == 0, (manifest.id, done.stderr)
    after = _states(run_hotfix, python)
    assert {m.id: after[m.id] for m in hotfixes} == {m.id: "applied" for m in hotfixes}
    for manifest in reversed(hotfixes):
        done = run_hotfix("rollback", manifest.id, "--python", python)
        assert done.returncode == 0, (manifest.id, done.stderr)
    audit = json.loads(run_hotfix("audit", ASCEND, "--python", python, "--json").stdout)
    assert audit["pristine"] is True and audit["version"] == release


@pytest.mark.parametrize("release", sorted(FIXED, key=Version))
def test_the_release_that_ships_a_fix_holds_it_and_says_fixed_upstream(run_hotfix, installs, release):
    with open_release(ASCEND, release) as files:  # the index's own file: a wheel, or the sdist
        for manifest, spec in FIXED[release]:
            old = next(r for r in PUBLISHED if spec.contains(r))
            series = catalog_hotfix(manifest, release_target(spec, old)).series
            assert presence(series, files).state == CONTAINED, manifest.id
    states = _states(run_hotfix, str(installs(release).python))
    assert {m.id: states[m.id] for m, _ in FIXED[release]} == {m.id: "fixed-upstream" for m, _ in FIXED[release]}


def test_check_catalog_judges_every_vllm_ascend_hotfix_on_its_real_releases(run_hotfix):
    ids = [m.id for m, _ in HOTFIXES]
    done = run_hotfix("check-catalog", *ids, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    cells = json.loads(done.stdout)["cells"]
    judged = {(c["hotfix"].split("@")[0], c["release"]): c["state"] for c in cells}
    for manifest, spec in HOTFIXES:
        for release in IN_RANGE:
            if manifest in IN_RANGE[release]:
                assert judged[manifest.id, release] == "applies"
        if manifest.fixed_in is not None:
            assert judged[manifest.id, manifest.fixed_in.first] == "fixed-upstream"


LATER_LINES = ["0.24.0rc1", "0.25.1rc1", "0.26.0rc1"]  # vllm-ascend's release branches after 0.23


def test_fixed_in_is_the_content_on_the_later_release_lines():
    """docs/catalog.md's table, measured: a va023 hotfix's ``fixed_in`` holds a later release exactly when the
    release's files hold the fix (its series' reverse applies: contained); applicable / conflicts cells are not
    in it. A bare ``fixed_in = "0.23.0"`` said fixed on every line (wrong for 10 of the 13)."""
    va023 = [(m, s) for m, s in HOTFIXES if m.id.startswith("va023-")]
    assert len(va023) == 13
    for release in LATER_LINES:
        with open_release(ASCEND, release) as files:
            for manifest, spec in va023:
                old = next(r for r in PUBLISHED if spec.contains(r))
                state = presence(catalog_hotfix(manifest, release_target(spec, old)).series, files).state
                assert manifest.is_fixed_in(release) == (state == CONTAINED), (manifest.id, release, state)


def test_outside_fixed_in_and_the_range_status_says_not_applicable(run_hotfix, installs):
    """va023-fp8-detection-a5-only on 0.26.0rc1: fixed in 0.23.0 on its own line, absent on 0.26.0rc1 (its
    patch applies there), outside its range ==0.23.0rc1: `not-applicable`, not `fixed-upstream`."""
    manifest, spec = next((m, s) for m, s in HOTFIXES if m.id == "va023-fp8-detection-a5-only")
    with open_release(ASCEND, "0.26.0rc1") as files:
        series = catalog_hotfix(manifest, release_target(spec, "0.23.0rc1")).series
        assert presence(series, files).state == APPLICABLE
    assert not manifest.is_fixed_in("0.26.0rc1") and manifest.is_fixed_in("0.23.0")
    assert _states(run_hotfix, str(installs("0.26.0rc1").python))[manifest.id] == "not-applicable"
