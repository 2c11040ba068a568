"""docfields checks three shapes with str methods (no regex compiled in every vLLM process): they accept
exactly what the regular expressions they replaced accept."""

import random
import re
import string

from vllm_hotfix_guard.core.docfields import is_commit, is_hex64, is_identifier, is_record_id

SHAPES = [(re.compile(r"[0-9a-f]{64}"), is_hex64),
          (re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}"), is_commit),
          (re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}"), is_record_id),
          (re.compile(r"[A-Za-z_][A-Za-z0-9_]*"), is_identifier)]
ALPHABET = string.ascii_letters + string.digits + "._+-/ \n\t\x00é\u0663\u0660\U0001d7d9ſK" + "abcdef" * 5


def test_the_str_checks_accept_what_the_patterns_accepted():
    rng = random.Random(25)
    samples = ["", "a", "_", "1a", "a1", "é", "A" * 128, "A" * 129, "x\n", "\u0663", "a\u0663", "a.b", "ſ", "K", "0" * 64]
    for _ in range(20000):
        length = rng.choice([0, 1, 2, 5, 39, 40, 41, 63, 64, 65, 127, 128, 129])
        pool = "0123456789abcdef" if rng.random() < 0.3 else ALPHABET
        samples.append("".join(rng.choice(pool) for _ in range(length)))
    for text in samples:
        for pattern, check in SHAPES:
            assert check(text) == bool(pattern.fullmatch(text)), (pattern.pattern, text)


def test_a_recorded_commit_that_is_not_a_full_lowercase_object_name_is_refused_naming_its_key():
    import json

    import pytest

    from vllm_hotfix_guard.errors import InvalidInput
    from vllm_hotfix_guard.txn.state import parse_state

    def doc(commit):
        return json.dumps({"schema": 2, "target": {"root": "/srv/vllm", "commit": commit}, "series": []}).encode()

    assert parse_state(doc("a" * 40), "state.json")[0]["commit"] == "a" * 40
    assert parse_state(doc("b" * 64), "state.json")[0]["commit"] == "b" * 64
    for bad in ("A" * 40, "a" * 39, "a" * 41, "g" * 40, 40):
        with pytest.raises(InvalidInput, match=r"target\.commit"):
            parse_state(doc(bad), "state.json")
