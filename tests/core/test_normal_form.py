"""core.pep440.normal_form is PEP 440's normal form as packaging writes it (str(Version(text))), None where
packaging raises InvalidVersion: the stdlib rule a checkout's version is written in, so the guard (no
packaging) derives the very string every command shows. packaging is the oracle."""

from __future__ import annotations

import random

import pytest
from packaging.version import InvalidVersion, Version

from vllm_hotfix_guard.core.pep440 import normal_form

SPELLINGS = ["1.0", "v0.30.0", "0.30.1.dev3+g02c7db4c5", "1.0rc2", "1.0-1", "1.0.post", "1.0-r2", "1!2.0", "0!1.0",
             "1.0a", "1.0.alpha-1.Beta", "1.0.dev", "1.0-dev1", "1.0+ABC-01.x", "  1.0  ", "01.002", "1.0c1",
             "1.0.preview2", "1.0-post-3", "1.0_rev4", "1.0pre", "v1", "1.0+", "1.0.", "abc", "1.0-", "",
             "1.0.dev1.post1", "1.0post1dev2", "1.0a1.post2.dev3+l.1", "0.11.0rc2.dev99+gabc.d20260101"]
ATOMS = ["1", "0", "01", ".", "-", "_", "a", "b", "rc", "c", "alpha", "beta", "pre", "preview", "post", "rev", "r",
         "dev", "+", "g1a", "!", "v", "X", "2", " "]


def packaging_says(text: str):
    try:
        return str(Version(text))
    except InvalidVersion:
        return None


@pytest.mark.parametrize("text", SPELLINGS)
def test_each_spelling_pep_440_permits(text):
    assert normal_form(text) == packaging_says(text)


def test_fifty_thousand_generated_strings_agree():
    rng = random.Random(20261201)
    wrong = []
    for _ in range(50_000):
        text = "".join(rng.choice(ATOMS) for _ in range(rng.randint(1, 9)))
        if normal_form(text) != packaging_says(text):
            wrong.append(text)
    assert wrong == []
