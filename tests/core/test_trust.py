"""core.trust_policy: the policy's strict reading (key-path errors), every refusal of the verdict with its own line
and exit code, expiry and its grace, rotation; RFC 3339 times against datetime."""

from __future__ import annotations

import datetime
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vllm_hotfix.core import signing
from vllm_hotfix_guard.core import minisign, trust_policy
from vllm_hotfix_guard.errors import ExitCode, InvalidInput

NOW = 1_800_000_000


def make_key() -> signing.SigningKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    seed = os.urandom(32)
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return signing.SigningKey(key_id=os.urandom(8), seed=seed, public=public)


KEYS = [make_key() for _ in range(3)]


def policy_text(threshold=2, extra="", keys=KEYS[:2], names=("release-team", "sre")) -> str:
    body = f"threshold = {threshold}\n{extra}\n"
    for name, key in zip(names, keys):
        body += f'[[keys]]\nname = "{name}"\nminisign = "{key.public_key.line}"\n'
    return body


def policy(**kwargs) -> trust_policy.Policy:
    return trust_policy.parse_policy(policy_text(**kwargs).encode(), "trust.toml")


def sig(key, message: bytes, comment="timestamp:1\tfile:hotfix.lock\thashed") -> tuple[str, bytes]:
    made = signing.sign(message, key, trusted_comment=comment)
    return minisign.signature_name("hotfix.lock", key.key_id), minisign.format_signature(made)


LOCK = b'{"schema": 1, "version": 7}\n'


def verdict(signatures, pol=None, **kwargs):
    return trust_policy.evaluate(LOCK, signatures, pol or policy(), now=kwargs.pop("now", NOW), subject="hotfix.lock",
                          **{"version": 7, **kwargs})


def test_two_listed_keys_are_trusted():
    v = verdict([sig(KEYS[0], LOCK), sig(KEYS[1], LOCK)])
    assert v.trusted and v.exit_code == 0 and v.signers == ("release-team", "sre")
    assert v.summary() == "hotfix.lock: signed by release-team, sre (2 of threshold 2), version 7"


@pytest.mark.parametrize("signatures, kind, code, words", [
    ([], trust_policy.UNSIGNED, ExitCode.UNSIGNED, "no signature file"),
    ([sig(KEYS[0], LOCK)], trust_policy.UNTRUSTED, ExitCode.UNTRUSTED, "1 valid signature(s)"),
    ([sig(KEYS[0], LOCK), sig(KEYS[2], LOCK)], trust_policy.UNTRUSTED, ExitCode.UNTRUSTED, "the policy needs 2"),
    ([sig(KEYS[0], LOCK), sig(KEYS[0], LOCK)], trust_policy.UNTRUSTED, ExitCode.UNTRUSTED, "(release-team)"),  # one key twice
    ([sig(KEYS[0], LOCK), sig(KEYS[1], LOCK + b" ")], trust_policy.TAMPERED, ExitCode.TAMPERED, "sre's signature"),
])
def test_each_refusal_has_its_line_and_exit_code(signatures, kind, code, words):
    v = verdict(signatures)
    assert not v.trusted and [r.kind for r in v.refusals] == [kind] and v.exit_code == code
    assert words in v.refusals[0].line and v.refusals[0].line.startswith(kind.upper())


def test_a_changed_trusted_comment_is_tampered():
    name, data = sig(KEYS[1], LOCK)
    forged = data.replace(b"trusted comment: timestamp:1", b"trusted comment: timestamp:2")
    v = verdict([sig(KEYS[0], LOCK), (name, forged)])
    assert v.exit_code == ExitCode.TAMPERED and "trusted comment does not verify" in v.refusals[0].line


def test_a_stale_signature_is_a_warning_once_the_threshold_is_met():
    pol = policy(threshold=2, keys=KEYS, names=("a", "b", "c"))
    v = verdict([sig(KEYS[0], LOCK), sig(KEYS[1], LOCK), sig(KEYS[2], b"an older lock")], pol)
    assert v.trusted and any("does not count" in w for w in v.warnings)


def test_legacy_malformed_and_unlisted_signatures_do_not_count():
    name, data = sig(KEYS[0], LOCK)
    raw = minisign.parse_signature(data)
    legacy = minisign.format_signature(minisign.Signature(
        algorithm="Ed", key_id=raw.key_id, signature=raw.signature, trusted_comment=raw.trusted_comment,
        global_signature=raw.global_signature))
    v = verdict([(name, legacy), ("hotfix.lock.minisig", b"garbage"), sig(KEYS[2], LOCK)])
    assert v.exit_code == ExitCode.UNTRUSTED
    assert {c.outcome for c in v.checks} == {minisign.LEGACY, "malformed", "unlisted"}
    assert any("legacy" in w for w in v.warnings)


def test_rollback_below_min_version():
    v = verdict([sig(KEYS[0], LOCK), sig(KEYS[1], LOCK)], policy(extra="min_version = 8"))
    assert v.exit_code == ExitCode.ROLLBACK and "version 7 is below the policy's min_version 8" in v.refusals[0].line
    assert verdict([sig(KEYS[0], LOCK), sig(KEYS[1], LOCK)], policy(extra="min_version = 8"), version=None) \
        .refusals[0].line.startswith("ROLLBACK: hotfix.lock: version 0")


def test_expiry_fails_or_warns_within_its_grace():
    signed = [sig(KEYS[0], LOCK), sig(KEYS[1], LOCK)]
    expires = trust_policy.format_utc(NOW - 3600)
    assert verdict(signed, expires=trust_policy.format_utc(NOW + 60)).trusted
    failed = verdict(signed, expires=expires)
    assert failed.exit_code == ExitCode.EXPIRED and "1h ago" in failed.refusals[0].line
    warned = verdict(signed, policy(extra='expired = "warn"\ngrace = "72h"'), expires=expires)
    assert warned.trusted and any(w.startswith("EXPIRED:") and "refused in 2d 23h" in w for w in warned.warnings)
    late = verdict(signed, policy(extra='expired = "warn"\ngrace = "30m"'), expires=expires)
    assert late.exit_code == ExitCode.EXPIRED and "past its grace of 30m" in late.refusals[0].line


def test_tampered_comes_first_when_several_refusals_apply():
    v = trust_policy.TrustDecision(subject="x", signers=(), threshold=1, checks=(), refusals=(
        trust_policy.Refusal(trust_policy.EXPIRED, "e"), trust_policy.Refusal(trust_policy.TAMPERED, "t")))
    assert v.exit_code == ExitCode.TAMPERED


@pytest.mark.parametrize("text, where", [
    (policy_text(threshold=3), "threshold: 3 signatures needed but only 2 key(s) listed"),
    (policy_text(threshold=0), "threshold: must be at least 1"),
    (policy_text(extra='threshhold = 1'), "threshhold: unknown key"),
    (policy_text(extra='expired = "maybe"'), "expired: expected one of 'fail', 'warn'"),
    (policy_text(extra='grace = "72h"'), 'grace: only with expired = "warn"'),
    (policy_text(extra='expired = "warn"\ngrace = "3 days"'), "grace: expected a duration"),
    (policy_text(extra="min_version = true"), "min_version: expected an integer, got a boolean"),
    (policy_text(extra='catalogs = "yes"'), "catalogs: expected one of 'any', 'signed'"),
    (policy_text(names=("same", "same")), "keys[1].name: 'same' is also keys[0].name"),
    (policy_text(keys=[KEYS[0], KEYS[0]]), "keys[1].minisign: key id"),
    (policy_text(names=("bad name", "x")), "keys[0].name: expected a name"),
    ("threshold = 1\n", "keys: needs at least one [[keys]] table"),
    ('threshold = 1\n[[keys]]\nname = "a"\nminisign = "RWQnotakey"\n', "keys[0].minisign"),
    ('threshold = 1\n[[keys]]\nname = "a"\n', "keys[0].minisign: missing"),
])
def test_policy_errors_name_the_key_path(text, where):
    with pytest.raises(InvalidInput) as caught:
        trust_policy.parse_policy(text.encode(), "trust.toml")
    assert caught.value.message.startswith("trust.toml: ") and where in caught.value.message


def test_rotation_needs_both_thresholds_and_a_higher_version():
    old = policy()
    new_text = policy_text(threshold=1, extra="version = 2", keys=[KEYS[2]], names=("new-team",)).encode()
    new = trust_policy.parse_policy(new_text, "new.toml")
    by_old_only = [sig(KEYS[0], new_text), sig(KEYS[1], new_text)]
    unproven = trust_policy.rotation(old, new_text, new, by_old_only, now=NOW, subject="new.toml")
    assert unproven.exit_code == ExitCode.UNTRUSTED and "(by its own keys)" in unproven.refusals[0].line
    signed = by_old_only + [sig(KEYS[2], new_text)]
    assert trust_policy.rotation(old, new_text, new, signed, now=NOW, subject="new.toml").trusted
    one_old = [sig(KEYS[0], new_text), sig(KEYS[2], new_text)]
    assert trust_policy.rotation(old, new_text, new, one_old, now=NOW, subject="new.toml").exit_code == ExitCode.UNTRUSTED
    same = trust_policy.parse_policy(policy_text(threshold=1, keys=[KEYS[2]], names=("new-team",)).encode(), "same.toml")
    assert trust_policy.rotation(old, new_text, same, signed, now=NOW, subject="s").exit_code == ExitCode.ROLLBACK
    # after it, the old keys stop counting
    assert verdict([sig(KEYS[0], LOCK), sig(KEYS[1], LOCK)], new).exit_code == ExitCode.UNTRUSTED
    assert verdict([sig(KEYS[2], LOCK)], new).trusted


@given(st.datetimes(min_value=datetime.datetime(1970, 1, 1), max_value=datetime.datetime(9999, 12, 31)))
def test_utc_times_agree_with_datetime(moment):
    moment = moment.replace(microsecond=0, tzinfo=datetime.timezone.utc)
    text = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    seconds = int(moment.timestamp())
    assert trust_policy.parse_utc(text) == seconds and trust_policy.format_utc(seconds) == text


@pytest.mark.parametrize("text", ["2027-02-29T00:00:00Z", "2027-01-01T24:00:00Z", "2027-01-01 00:00:00Z",
                                  "2027-01-01T00:00:00+00:00", "2027-1-01T00:00:00Z", "２０２７-01-01T00:00:00Z"])
def test_other_times_are_refused(text):
    assert trust_policy.parse_utc(text) is None


def test_durations():
    assert [trust_policy.parse_duration(t) for t in ("72h", "30m", "7d", "2w", "90s")] == [259200, 1800, 604800, 1209600, 90]
    assert [trust_policy.parse_duration(t) for t in ("72", "h", "-1h", "1.5h", "3 days")] == [None] * 5


def test_the_policy_cap_is_one_number():
    from vllm_hotfix_guard.txn import signed

    assert signed.POLICY_LIMIT == trust_policy.POLICY_LIMIT
