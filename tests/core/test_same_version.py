"""core/pep440's two version questions against `packaging` itself, on every spelling PEP 440 permits:
"is this the same hotfix version" (same_version: the CLI's catalog/index and the guard's pins call it) and
"is this release in that range" (version_in / range_takes: the CLI's catalog/model.in_range and the guard's
pins call it). The CLI and the guard held to one answer on real manifests: tests/test_guard_record_code.py."""

from __future__ import annotations

import itertools
import random

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from vllm_hotfix_guard.core import pep440

SPELLINGS = ["1", "1.0", "1.0.0", "01.00", "v1.0", " 1.0 ", "1!1.0", "0!1.0", "1.0-1", "1.0.post1", "1.0post1",
             "1.0-r1", "1.0_rev_1", "1.0-post1", "1.0.post", "1.0-post", "1.0a1", "1.0alpha1", "1.0-a", "1.0a0",
             "1.0c1", "1.0rc1", "1.0pre1", "1.0.preview1", "1.0rc1-1", "1.0rc1.post1", "1.0.dev", "1.0-dev0",
             "1.0-1.dev1", "1.0-1dev1", "1.0+a", "1.0+A", "1.0+b", "1.0+a.1", "1.0+a-01", "1.0+a_1", "1.0+cu128",
             "1.0+", "1.0+!!", "1.0+a..b", "1.0-", "1.0.", "1..0", "", "x", "X", "5", 5, "05", "5.0",
             "\u0661.\u0660", "1.\u0660", "1.0rc\u0661", "1.0+\u0661", "1.0+\u017f", "1.0po\u017ft1", "1.0\xa0"]


def packaging_same(a, b) -> bool:
    """What the CLI said before it called the kernel: equal as written, or equal PEP 440 Versions."""
    if str(a) == str(b):
        return True
    try:
        return Version(str(a)) == Version(str(b))
    except InvalidVersion:
        return False


def test_same_version_is_packaging_s_equality_on_every_pair_of_spellings():
    from vllm_hotfix.catalog.index import hotfix_version_key

    wrong = [(a, b) for a, b in itertools.product(SPELLINGS, repeat=2) if pep440.same_version(a, b) != packaging_same(a, b)]
    assert wrong == []
    for a, b in itertools.product(SPELLINGS, repeat=2):  # the catalog's "declared twice" rule says the same
        if str(a).strip() and str(b).strip():
            assert pep440.same_version(a, b) == (hotfix_version_key(a) == hotfix_version_key(b)), (a, b)


def test_no_version_and_a_bool_match_nothing():
    assert not pep440.same_version(None, None) and not pep440.same_version(None, "1")
    assert not pep440.same_version(True, "True") and not pep440.same_version("1", False)


def test_the_implicit_post_release_is_the_post_release():
    """1.0-1 is 1.0.post1 (PEP 440's implicit post-release); the kernel read it as no version at all, so a
    record of 1.0-1 was not the manifest's 1.0.post1, and release 0.23.0-1 was inside every range."""
    assert pep440.same_version("1.0-1", "1.0.post1") and pep440.same_release("1.0-1", "1.0.post1")
    assert pep440.release_key("1.0-1") == pep440.release_key("1.0.post1") > pep440.release_key("1.0")
    assert pep440.version_in("0.23.0-1", ">=0.23.0,<0.24") and not pep440.version_in("0.23.0-1", "==0.23.0")
    assert not pep440.version_in("0.23.0-1", ">=0.30.0")


def test_hotfix_versions_with_other_local_labels_are_two_versions_and_releases_are_one():
    """The catalog keeps 1.0+a and 1.0+b as two versions of a hotfix, so a record of one is not the other;
    a local label on a release names a build of the same release (tests/test_hotfix_lock.py: 0.30.0+cu126)."""
    assert not pep440.same_version("1.0+a", "1.0+b") and not pep440.same_version("1.0", "1.0+a")
    assert pep440.same_version("1.0+A.01", "1.0+a-1")
    assert pep440.same_release("0.30.0", "0.30.0+cu126") and pep440.same_release("0.30.0+cu126", "0.30.0+cu128")


@pytest.mark.parametrize("text", ["\u0661.\u0660", "1.\u0660", "0.30.0+", "0.30.0+!!", "1.0+a..b", "1.0+\u017f"])
def test_what_packaging_refuses_is_no_version(text):
    """Digits of another script, an empty or malformed local label: packaging says InvalidVersion; the kernel
    read them as 1.0 / 0.30.0 (a release in every range that took 0.30.0)."""
    with pytest.raises(InvalidVersion):
        Version(text)
    with pytest.raises(ValueError):
        pep440.release_key(text)
    assert pep440.normal_form(text) is None and not pep440.version_at_least(text, "0")
    assert not pep440.version_in(text, ">=0") and not pep440.same_version(text, "1.0")


ATOMS = ["1", "0", "01", ".", "-", "_", "a", "rc", "c", "post", "r", "dev", "+", "g1a", "!", "v", "X", " ",
         "\u0661", "\u017f", "\u212a", "\xa0"]


def test_twenty_thousand_generated_strings_parse_as_packaging_parses_them():
    rng = random.Random(20261207)
    wrong = []
    for _ in range(20_000):
        text = "".join(rng.choice(ATOMS) for _ in range(rng.randint(1, 8)))
        try:
            expected = str(Version(text))
        except InvalidVersion:
            expected = None
        if pep440.normal_form(text) != expected or pep440.same_version(text, "1") != packaging_same(text, "1"):
            wrong.append(text)
    assert wrong == []


RELEASES = ["0.23.0rc1", "0.23.0", "0.23.0.post1", "0.23.0-1", "0.24.0rc1", "0.26.0rc1", "0.29.0", "0.30.0rc1",
            "0.30.0rc2", "0.30.0rc2.dev3", "0.30.0rc2.post1", "0.30.0rc3", "0.30.0.dev1", "0.30.0", "0.30",
            "0.30.0.0", "v0.30.0", "0.30.0+cu128", "0.30.0+CU128", "0.30.0+cu129", "0.30.0.post1",
            "0.30.1.dev3+g02c7db4c5", "0.31.0rc1", "0.31.0", "0.32.0", "0.32.0.post1", "1!0.30.0",
            "garbage", "0.30.0+", "\u0660.\u0663\u0660"]
SPECIFIERS = ["==0.23.0rc1", "==0.24.0rc1", "==0.23.0", ">=0.30.0rc1,<=0.30.0rc2", ">=0.30.0", ">=0.27.0,<0.32.0",
              ">=0.25.0,<0.32.0", "~=0.30.0", "~=0.30", "~=0.30.0rc1", "==0.30.*", "==0.30.0.*", "!=0.30.*",
              "!=0.30.0", ">=0.25,!=0.30.0,<0.32", ">=0.25,!=0.30.0rc2", "==0.30.0+cu128", "!=0.30.0+cu128",
              "===0.30.0", "===0.30.0+CU128", ">0.30.0", "<0.30.0", ">0.30.0rc1", "<0.31.0", "<=0.30.0",
              ">0.30.0.post1", "<0.30.0.post1", "==1!0.30.0", "==0.30", " >= 0.30.0 , < 0.31 ", ""]


def test_version_in_is_packaging_s_contains_with_pre_releases_on_the_table():
    """The spellings manifests use (pre-releases, ==, ranges, ~=, ==X.*, !=, exclusions) and the exotic ones
    (local labels, ===, epochs, implicit post-releases, what is not a version) on every release of the table."""
    wrong = [(v, s) for v, s in itertools.product(RELEASES, SPECIFIERS)
             if pep440.version_in(v, s) != SpecifierSet(s).contains(v, prereleases=True)]
    assert wrong == []


def test_a_local_label_counts_only_against_a_clause_that_names_one():
    assert pep440.version_in("0.30.0+cu128", "==0.30.0") and pep440.version_in("0.30.0", "!=0.30.0+cu128")
    assert not pep440.version_in("0.30.0+cu129", "==0.30.0+cu128") and not pep440.version_in("0.30.0", "==0.30.0+cu128")
    assert pep440.version_in("0.30.0+CU128", "==0.30.0+cu128")


def test_arbitrary_equality_is_the_string():
    assert pep440.version_in("0.30.0", "===0.30.0") and pep440.version_in("0.30.0+CU128", "===0.30.0+cu128")
    assert not pep440.version_in("0.30", "===0.30.0") and not pep440.version_in("0.30.0+cu128", "===0.30.0")
    assert pep440.version_in("foo", "===FOO")


def test_a_version_that_is_not_pep_440_is_in_no_range_but_the_empty_one():
    assert not pep440.version_in("garbage", ">=0") and not pep440.version_in("garbage", "!=1.0")
    assert pep440.version_in("garbage", "") and pep440.range_takes(None, "garbage")


def test_range_takes_an_unknown_release_only_without_a_range():
    assert pep440.range_takes(None, None) and pep440.range_takes(None, "0.30.0")
    assert not pep440.range_takes(">=0", None) and pep440.range_takes(">=0.30.0rc1", "0.30.0rc2")


NORMAL = ["0.30.0", "0.23.0rc1", "0.30.1.dev3+g02c7db4c5", "0.11.0rc2.dev99+gabc.d20260101", "0.30.0.post1",
          "1.0a1.post2.dev3+l.1", "0.30.0+cu128", "2024.1", "1.0b0", "01.002"]
NOT_NORMAL = ["1!2.0", "v1.0", "1.0RC1", "1.0c1", "1.0-1", "1.0.dev", "1.0post1", "1.0.rc1", "1.0+a..b", "1.0+",
              "\u0661.0", "1.0.dev1.post1", "1.0a1a2", ".1", "1.", "", "+1", "1.0+A-1"]


def test_a_version_in_normal_form_is_read_without_the_grammar_and_gives_its_parts(monkeypatch):
    """The guard reads the installed release (metadata: normal form) in every process: str methods, no regex
    compiled (about 0.3 ms), the grammar's very parts; anything else is the grammar's to read."""
    answers = {text: pep440._grammar_parts(text) for text in NORMAL}
    with monkeypatch.context() as m:
        m.setattr(pep440.re, "fullmatch", lambda *a: (_ for _ in ()).throw(AssertionError("regex used")))
        assert {text: pep440._parse(text) for text in NORMAL} == answers
    assert all(pep440._normal_parts(text) is None for text in NOT_NORMAL)
    rng = random.Random(7)
    for _ in range(20_000):
        text = "".join(rng.choice(ATOMS + ["rc", "a", "b", ".post", ".dev", "+", "."]) for _ in range(rng.randint(1, 8)))
        fast = pep440._normal_parts(text.strip())
        if fast is not None:
            assert fast == pep440._grammar_parts(text.strip()), text


def test_every_combination_of_segments_reads_alike_and_every_normal_form_takes_the_str_path():
    for parts in itertools.product(["0", "0.30.0", "01.2", "1.0."], ["", "a1", "b0", "rc12", "c1", "RC1", "rc", ".rc1"],
                                   ["", ".post0", ".post3", "-1", ".post", "post1"], ["", ".dev0", ".dev7", "dev1", ".dev"],
                                   ["", "+cu128", "+g02c7db4c5.d20260101", "+A-01", "+", "+a..b"]):
        text = "".join(parts)
        fast = pep440._normal_parts(text)
        try:
            grammar = pep440._grammar_parts(text)
        except ValueError:
            grammar = None
        assert fast is None or fast == grammar, text
        if grammar is not None:
            assert pep440._normal_parts(pep440.normal_form(text)) == grammar, text
