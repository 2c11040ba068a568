"""core/pep440.fixed_by -- THE rule "is release R fixed by fixed_in F" -- against `packaging` itself: F is a
version V (every release >= V) or a union of specifier sets ``A || B``; pre-releases match as for an installed
release (pip's ``installed=True``; where a set names a pre-release, pip's plain ``contains`` says the same)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from vllm_hotfix_guard.core import pep440, verdict

from tests.core.test_core_verdict import releases, versions

suffixes = st.sampled_from(["", "", "rc1", "rc2", "a1", ".post1", ".dev0"])
named = st.builds(lambda r, s: r + s, releases, suffixes)
lower = st.builds(lambda op, r, s: f"{op}{r if op != '~=' or '.' in r else r + '.0'}{s}",
                  st.sampled_from([">=", ">=", "==", "~="]), releases, suffixes)
other = st.one_of(st.builds(lambda op, v: f"{op}{v}", st.sampled_from(["<", "<=", ">", "!=", ">="]), named),
                  st.builds(lambda r: f"!={r}.*", releases))
spec_sets = st.builds(lambda low, rest: ",".join([low, *rest]), lower, st.lists(other, max_size=2))
unions = st.lists(spec_sets, min_size=1, max_size=3).map(" || ".join)


def _packaging(version: str, fixed_in: str) -> bool:
    sets = [f">={fixed_in}"] if fixed_in[0].isdigit() else fixed_in.split("||")
    return any(SpecifierSet(s.strip()).contains(version, installed=True) for s in sets)


@settings(max_examples=800, deadline=None)
@given(versions, unions)
def test_fixed_by_agrees_with_packaging_on_unions(version, fixed_in):
    public = Version(version).public
    assert pep440.fixed_in_sets(fixed_in)
    assert pep440.fixed_by(public, fixed_in) == _packaging(public, fixed_in), (public, fixed_in)
    for spec in fixed_in.split("||"):  # a set that names a pre-release: pip's own default agrees
        s = SpecifierSet(spec.strip())
        if s.prereleases:
            assert pep440.version_in(public, spec) == s.contains(public), (public, spec)


@settings(max_examples=400, deadline=None)
@given(versions, named)
def test_a_bare_version_is_what_it_was_every_release_from_it_on(version, fixed_in):
    assert pep440.fixed_by(version, fixed_in) == pep440.version_at_least(version, fixed_in)
    assert pep440.fixed_in_sets(fixed_in) == (f">={fixed_in}",)
    assert pep440.fixed_in_first(fixed_in) == fixed_in


@settings(max_examples=300, deadline=None)
@given(unions)
def test_the_first_release_is_the_lowest_lower_bound(fixed_in):
    first = pep440.fixed_in_first(fixed_in)
    lows = []
    for spec in _sets(fixed_in):
        lows.append(max((Version(s.version) for s in spec if s.operator in (">=", "==", "~=")), default=None))
    assert Version(first) == min(lows)


def _sets(fixed_in: str) -> list:
    return [SpecifierSet(s.strip()) for s in fixed_in.split("||")]


def test_the_measured_vllm_ascend_lines():
    """docs/catalog.md's table: va023-fia-v2-contiguous-kv is in 0.23.0, 0.23.0.post1, 0.25.1rc1, 0.26.0rc1,
    not in 0.24.0rc1; what the range of one line says is not the next line's answer."""
    fia = ">=0.23.0,<0.24.0rc1 || >=0.25.1rc1"
    assert [r for r in ("0.23.0rc1", "0.23.0", "0.23.0.post1", "0.24.0rc1", "0.25.1rc1", "0.26.0rc1")
            if pep440.fixed_by(r, fia)] == ["0.23.0", "0.23.0.post1", "0.25.1rc1", "0.26.0rc1"]
    assert pep440.fixed_in_first(fia) == "0.23.0"
    assert verdict.release_rule("0.24.0rc1", fixed_in=fia, versions="==0.23.0rc1", distribution="vllm-ascend") == (
        verdict.NOT_APPLICABLE, "vllm-ascend 0.24.0rc1 is outside ==0.23.0rc1")
    assert verdict.release_rule("0.26.0rc1", fixed_in=fia, versions="==0.23.0rc1", distribution="vllm-ascend") == (
        verdict.FIXED_UPSTREAM, f"vllm-ascend 0.26.0rc1 is in {fia}")
    assert verdict.release_rule("0.32.0", fixed_in="0.32.0", versions=None, distribution="vllm")[1] == \
        "vllm 0.32.0 >= 0.32.0"


@pytest.mark.parametrize("bad, why", [
    ("", "empty"), ("soon", "not a PEP 440 version: 'soon'"), ("<0.24", "has no lower bound"),
    (">=0.23 ||", "an empty specifier set"), (">=0.23,,<0.24", "an empty specifier set"),
    (">=0.23,<x", "not a PEP 440 version"), (">=0.23.*", "a wildcard only goes with"),
    ("==0.23.*", "has no lower bound"), ("~=1", "~= needs at least two"), ("~=1.post1", "~= needs at least two"), (">=0.23 <0.24", "not a PEP 440"),
])
def test_a_bad_fixed_in_is_refused_with_what_is_wrong(bad, why):
    with pytest.raises(ValueError, match=why.replace("*", r"\*").replace("|", r"\|")):
        pep440.fixed_in_sets(bad)
    assert pep440.fixed_by("0.23.0", bad) is False and pep440.fixed_in_first(bad) is None


FAMILY = ["0.9", "1.0a1", "1.0rc1", "1.0rc1.dev1", "1.0rc1.post1", "1.0rc1.post1.dev2", "1.0rc2", "1.0.dev0", "1.0",
          "1.0.post0", "1.0.post1.dev0", "1.0.post1", "1.0.post2", "1.1"]


def test_every_clause_on_one_releases_family_agrees_with_packaging():
    """<V / >V carve out V's own pre-, dev- and post-releases: every pair of one family, every operator."""
    for op in ("<", ">", "<=", ">=", "==", "!=", "~="):
        for wanted in FAMILY:
            if op == "~=" and "." not in wanted:
                continue
            for version in FAMILY:
                expected = SpecifierSet(f"{op}{wanted}").contains(version, installed=True)
                assert pep440.version_in(version, f"{op}{wanted}") == expected, (version, op, wanted)


def test_a_record_keeps_a_fixed_in_union_and_refuses_a_bad_one_naming_its_key(tmp_path):
    import json

    from vllm_hotfix_guard.errors import InvalidInput
    from vllm_hotfix_guard.txn.state import RecordedHotfix, TargetState, parse_state

    union = ">=0.23.0,<0.24.0rc1 || >=0.25.1rc1"
    recorded = RecordedHotfix(id="va023-fia-v2-contiguous-kv", version=1, applied_at="2026-12-07T07:00:00Z",
                              source="catalog", patches=(), files=(), fixed_in=union, versions="==0.23.0rc1")
    data = TargetState(tmp_path, {"root": "/srv/vllm-ascend"}, {recorded.id: recorded}).to_bytes()
    assert parse_state(data, "state.json")[1][recorded.id].fixed_in == union
    doc = json.loads(data)
    doc["series"][0]["fixed_in"] = ">=0.23.0 || <0.20"
    with pytest.raises(InvalidInput, match=r"series\[0\]\.fixed_in: '<0.20' has no lower bound"):
        parse_state(json.dumps(doc).encode(), "state.json")
