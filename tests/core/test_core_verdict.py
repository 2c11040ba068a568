"""core/verdict.py's stdlib PEP 440 (the guard has no `packaging`) against `packaging` itself."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from vllm_hotfix_guard.core import pep440, verdict

releases = st.lists(st.integers(0, 12), min_size=1, max_size=4).map(lambda xs: ".".join(map(str, xs)))
versions = st.builds(
    lambda epoch, release, pre, post, dev, local: f"{epoch}{release}{pre}{post}{dev}{local}",
    st.sampled_from(["", "1!"]),
    releases,
    st.sampled_from(["", "a1", "b2", "rc1", "rc0", ".alpha3", "-beta", "c4", "pre1", "preview2"]),
    st.sampled_from(["", ".post1", "post2", "-r3", ".rev0"]),
    st.sampled_from(["", ".dev0", "dev3"]),
    st.sampled_from(["", "+local.1", "+cu128"]),
)


@settings(max_examples=400, deadline=None)
@given(versions, versions)
def test_ordering_agrees_with_packaging(a, b):
    """Local labels aside (the guard ignores them, as `>=` on a fixed-in release does)."""
    pa, pb = Version(a), Version(b)
    pa, pb = Version(pa.public), Version(pb.public)
    assert (pep440.release_key(a) < pep440.release_key(b)) == (pa < pb)
    assert (pep440.release_key(a) == pep440.release_key(b)) == (pa == pb)
    assert pep440.version_at_least(a, b) == (pa >= pb)


@settings(max_examples=600, deadline=None)
@given(versions, st.sampled_from([">=", "<", "==", "!=", "<=", ">", "~="]), releases)
def test_specifiers_agree_with_packaging(version, op, wanted):
    if op == "~=" and "." not in wanted:
        wanted += ".0"
    clause = f"{op}{wanted}"
    public = Version(version).public
    assert pep440.version_in(public, clause) == SpecifierSet(clause, prereleases=True).contains(public), clause


def test_plain_releases_take_the_fast_path_and_give_the_grammars_answer(monkeypatch):
    import re

    for text in ["0.30.0", "1", "0.9.10", "2024.1", " 0.32.0 ", "1.0.0.0", "0.31.0rc1", "1!2.0", "v1.2"]:
        grammar = pep440._match(text)
        with_grammar = pep440.release_key(text)
        with monkeypatch.context() as m:  # a plain release never reaches the regex
            m.setattr(pep440.re, "fullmatch", lambda *a: (_ for _ in ()).throw(AssertionError("regex used")))
            try:
                fast = pep440.release_key(text)
            except AssertionError:
                assert not text.strip().replace(".", "").isdecimal()
                continue
        assert fast == with_grammar and grammar is not None, text
    for bad in ["1..2", ".1", "1.", "", "²"]:
        try:
            pep440.release_key(bad)
        except ValueError:
            continue
        raise AssertionError(bad)


def test_versions_sort_like_packaging_on_vllm_release_history():
    history = ["0.25.0", "0.26.0", "0.29.0", "0.30.0", "0.30.0rc1", "0.31.0.dev0", "0.31.0", "0.32.0", "0.32.0.post1"]
    for a, b in itertools.product(history, repeat=2):
        assert pep440.version_at_least(a, b) == (Version(a) >= Version(b))


@settings(max_examples=300, deadline=None)
@given(versions, st.sampled_from(["==", "!="]), releases)
def test_prefix_clauses_agree_with_packaging(version, op, wanted):
    clause = f"{op}{wanted}.*"
    public = Version(version).public
    assert pep440.version_in(public, clause) == SpecifierSet(clause, prereleases=True).contains(public), clause


def test_the_release_changed_exactly_when_judge_says_stale_for_it():
    """txn/judgement.release_of (apply's new series, rollback's forget) asks core.verdict.release_change, the
    rule of judge's step 4: for every combination, the release changed iff judge answers STALE with that
    very detail."""
    applied = (verdict.FileCheck("vllm/a.py", verdict.PATCHED, "a" * 64, "a" * 64, "/x/vllm/a.py"),)
    for recorded, installed, moved in itertools.product(
            (None, "0.30.0", "0.30"), (None, "0.30.0", "0.30.0.post0", "0.31.0"), (None, "commit a to commit b")):
        changed = verdict.release_change(recorded, installed, moved, "vllm")
        state, detail = verdict.hotfix_state(applied, recorded_release=recorded, installed_release=installed, moved=moved,
                                      distribution="vllm")
        assert (state, detail) == (verdict.STALE, changed) if changed else state == verdict.APPLIED
        assert (changed is not None) == (moved is not None or bool(
            recorded and installed and Version(recorded) != Version(installed)))
