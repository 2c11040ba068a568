"""core.fingerprint: what goes in, in which order, and what leaves it unchanged."""

from __future__ import annotations

import hashlib

from vllm_hotfix_guard.core.fingerprint import NONE, Entry, canonical, fingerprint, is_fingerprint

A = Entry("mamba-align-block-size", 2, "vllm", "0.30.0", (("vllm/b.py", "b" * 64), ("vllm/a.py", "a" * 64)))
B = Entry("scheduler-note", "1", "vllm", "0.30.0", (("vllm/c.py", None),))


def test_canonical_text_is_documented_order():
    """Hotfixes in series order (the order given), files sorted by path."""
    assert canonical([B, A]) == (
        "vllm-hotfix-fingerprint/2\n"
        "hotfix scheduler-note 1 vllm 0.30.0\nfile vllm/c.py -\n"
        f"hotfix mamba-align-block-size 2 vllm 0.30.0\nfile vllm/a.py {'a' * 64}\nfile vllm/b.py {'b' * 64}\n")


def test_the_series_order_is_part_of_it_and_distributions_are_grouped():
    assert fingerprint([A, B]) != fingerprint([B, A])
    C = Entry("ascend-fix", 1, "vllm-ascend", "0.30.0rc2", (("vllm_ascend/x.py", "c" * 64),))
    assert canonical([A, C, B]) == canonical([A, B, C])  # grouped by distribution, the series order kept within


def test_digest_is_prefix_and_16_hex_of_sha256_of_canonical():
    expected = "hf1-" + hashlib.sha256(canonical([A, B]).encode()).hexdigest()[:16]
    assert fingerprint([A, B]) == expected
    assert is_fingerprint(expected) and is_fingerprint(NONE) and not is_fingerprint("hf1-xyz")
    assert fingerprint([]) == NONE


def test_every_input_changes_it():
    base = fingerprint([A])
    changed = [
        Entry("other", A.version, A.distribution, A.installed_version, A.files),
        Entry(A.id, 3, A.distribution, A.installed_version, A.files),
        Entry(A.id, A.version, "vllm-ascend", A.installed_version, A.files),
        Entry(A.id, A.version, A.distribution, "0.30.1", A.files),
        Entry(A.id, A.version, A.distribution, A.installed_version, (("vllm/b.py", "b" * 63 + "c"), A.files[1])),
        Entry(A.id, A.version, A.distribution, A.installed_version, A.files[:1]),
    ]
    assert len({base, *(fingerprint([e]) for e in changed)}) == len(changed) + 1


def test_whitespace_in_a_field_cannot_forge_another_line():
    forged = Entry("x 1 vllm 0.30.0\nfile", 1, None, None, ())
    assert "\nfile" not in canonical([forged]).split("\n", 1)[1].rstrip("\n")


def test_every_character_is_written_by_the_documented_rule():
    """A field is written as is when every character is printable and none is white space; otherwise
    each such character becomes "_" -- for every code point (the whole-string shortcut included)."""
    import sys

    def rule(text: str) -> str:
        return "".join(ch if ch.isprintable() and not ch.isspace() else "_" for ch in text)

    for start in range(0, sys.maxunicode + 1, 4096):
        chunk = "".join(chr(c) for c in range(start, min(start + 4096, sys.maxunicode + 1)) if not 0xD800 <= c < 0xE000)
        odd = [ch for ch in chunk if ch.isspace() or not ch.isprintable()]
        for piece in (chunk, *(f"a{ch}b" for ch in chunk[::97]), *(ch for ch in chunk if ch.isspace()), *odd[::97]):
            entry = Entry(piece, 1, None, None, ())
            assert canonical([entry]).split("\n")[1] == f"hotfix {rule(piece)} 1 - -"
