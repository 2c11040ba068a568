"""The guard with a trust policy (vllm_hotfix_guard/trust.py), in this process: every refusal of `verify --lock --trust`
with the same words, the policy that cannot be used, and the verdict cache -- a second check reuses it, a
tampered, linked, foreign or loose entry (or directory) is ignored, an unsigned lock never comes from it.
Keys and signatures are real minisign ones (test_signed_locks.Key). Under vLLM's real loader:
tests/test_guard_vllm_trust.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_hotfix_guard import plugin
from vllm_hotfix_guard import trust as guard_trust

sys.path.insert(0, str(Path(__file__).resolve().parent / "commands"))
from test_signed_locks import Key, lock_and_policy, minisign_run, write_policy  # noqa: E402  (skips without minisign)

pytestmark = pytest.mark.tools


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    directory = tmp_path_factory.mktemp("keys")
    return {name: Key(directory, name) for name in ("release", "sre", "other")}


@pytest.fixture
def setup(tmp_path, keys, monkeypatch):
    path = lock_and_policy(tmp_path, keys)
    policy = tmp_path / "trust.toml"
    ready = tmp_path / "ready"
    ready.mkdir()
    monkeypatch.setenv("HOTFIX_TRUST", str(policy))
    monkeypatch.setenv("HOTFIX_READY_DIR", str(ready))
    monkeypatch.delenv("HOTFIX_TRUST_CHAIN", raising=False)
    from vllm_hotfix_guard import ready as guard_ready

    monkeypatch.setattr(guard_ready, "_this", {})  # what this process recorded: each test's own (a refused lock fails)
    return {"lock": path, "policy": policy, "ready": ready, "keys": keys}


def sign(setup, *names):
    for name in names:
        key = setup["keys"][name]
        done = minisign_run("-S", "-s", key.key, "-m", setup["lock"], "-x", key.sig(setup["lock"]))
        assert done.returncode == 0, done.stderr


def trust_verdict(setup):
    verdicts = plugin.check(lock=str(setup["lock"]), require=())
    found = [v for v in verdicts if v.hotfix_id == guard_trust.TRUST_ID]
    return found[0] if found else None, verdicts


def entries(setup):
    return sorted((setup["ready"] / guard_trust.CACHE_DIR).glob("*.json"))


def test_without_a_policy_the_guard_checks_no_signature(setup, monkeypatch):
    monkeypatch.delenv("HOTFIX_TRUST")
    verdict, verdicts = trust_verdict(setup)
    assert verdict is None and [v.hotfix_id for v in verdicts] == ["mamba-align-block-size"]


@pytest.mark.parametrize("case, words", [
    ("unsigned", "UNSIGNED: "), ("one key", "UNTRUSTED: "), ("unlisted key", "UNTRUSTED: "),
    ("tampered", "TAMPERED: "), ("rollback", "ROLLBACK: "), ("expired", "EXPIRED: "),
])
def test_every_refusal_is_verify_locks_line_and_the_lock_is_not_checked_further(setup, run_hotfix, case, words):
    lock = setup["lock"]
    if case == "expired":
        data = json.loads(lock.read_text())
        data["expires"] = "2020-01-01T00:00:00Z"
        lock.write_text(json.dumps(data))
    sign(setup, *{"unsigned": (), "one key": ("release",), "unlisted key": ("release", "other")}.get(case, ("release", "sre")))
    if case == "tampered":
        lock.write_text(lock.read_text().replace('"version": 7', '"version": 70'))
    if case == "rollback":
        write_policy(setup["policy"], setup["keys"], extra="min_version = 8")
    verdict, verdicts = trust_verdict(setup)
    assert verdicts == (verdict,) and not verdict.in_effect and verdict.source == "lock", verdicts
    assert verdict.detail.startswith(words), verdict.detail
    verified = run_hotfix("verify", "--lock", lock, "--trust", setup["policy"])
    assert "; ".join(verified.stdout.splitlines()) == verdict.detail  # one verdict, the same words (one per refusal)
    assert entries(setup) == []  # a refusal is never cached
    line = plugin.summary_line(verdicts, "hf1-none")
    assert f"(trust) [lock] NOT IN EFFECT: {words}" in line and "hotfix sign LOCK --key KEY" in line


def test_strict_mode_stops_a_serving_process_on_a_refused_lock(setup, monkeypatch):
    monkeypatch.setenv("HOTFIX_LOCK", str(setup["lock"]))
    monkeypatch.setenv("HOTFIX_STRICT", "1")
    monkeypatch.setattr(sys, "argv", ["vllm", "serve", "model"])
    monkeypatch.setattr(plugin, "_last_check", None)
    with pytest.raises(plugin.HotfixNotInEffect, match=r"\(trust\): UNSIGNED: "):
        plugin.register()


def test_a_policy_that_cannot_be_used_trusts_nothing(setup):
    sign(setup, "release", "sre")
    os.chmod(setup["policy"], 0o666)
    verdict, verdicts = trust_verdict(setup)
    assert verdicts == (verdict,) and not verdict.in_effect
    assert verdict.detail.startswith("cannot use the trust policy: ") and "writable by others" in verdict.detail


def test_a_signed_lock_passes_and_the_next_check_reuses_the_verdict(setup):
    sign(setup, "release", "sre")
    verdict, verdicts = trust_verdict(setup)
    assert verdict.in_effect and "signed by release, sre (2 of threshold 2), version 7" in verdict.detail
    assert [v.hotfix_id for v in verdicts] == ["(trust)", "mamba-align-block-size"]  # then the files are checked
    (entry,) = entries(setup)
    assert entry.stat().st_mode & 0o777 == 0o600 and (entry.parent.stat().st_mode & 0o777) == 0o700
    again, _ = trust_verdict(setup)
    assert again.in_effect and again.detail.startswith("trusted: verified by an earlier process of this container")


def test_a_second_process_imports_no_verifier(setup):
    """Nor the policy's parser or the signature format (issue 43's budget: core/signames.py names the files)."""
    sign(setup, "release", "sre")
    verifier = [f"vllm_hotfix_guard.core.{m}" for m in ("ed25519", "minisign", "trust_policy", "policytoml")]
    script = ("import sys; from vllm_hotfix_guard import plugin; "
              f"v = plugin.check(lock={str(setup['lock'])!r}, require=()); "
              f"print(v[0].detail); print([m for m in {verifier!r} if m in sys.modules])")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    first, second = (subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
                     for _ in range(2))
    assert first.stdout.splitlines()[1] == repr(verifier) and "signed by release, sre" in first.stdout, first.stderr
    assert second.stdout.splitlines() == [f"trusted: verified by an earlier process of this container (cache "
                                          f"{setup['ready'] / guard_trust.CACHE_DIR})", "[]"], second.stderr


def test_the_readiness_record_names_the_lock_bytes_judged_without_reading_them_again(setup, monkeypatch):
    """Issue 43's budget: the lock is read once per process; its record carries the sha256 of those bytes."""
    import hashlib

    from vllm_hotfix_guard import ready, ready_probe

    sign(setup, "release", "sre")
    monkeypatch.setattr(ready, "lock_digest", lambda: pytest.fail("the lock was read again for the record"))
    monkeypatch.setattr(plugin, "_last_check", None)
    monkeypatch.setenv("HOTFIX_LOCK", str(setup["lock"]))
    for name in ("HOTFIX_REQUIRE", "HOTFIX_STRICT"):
        monkeypatch.delenv(name, raising=False)
    plugin.register()
    name = f"{os.getpid()}{ready.SUFFIX}"
    record = ready_probe.parse(name, (setup["ready"] / name).read_bytes())
    assert record.lock == hashlib.sha256(setup["lock"].read_bytes()).hexdigest()


def forge(setup, how):
    """Change the one entry the signed lock left, or its directory, as someone else could."""
    (entry,) = entries(setup)
    if how == "content":
        entry.write_text(entry.read_text().replace('"trusted"', '"trusted "'))
    elif how == "link":
        real = entry.with_name("real")
        entry.rename(real)
        entry.symlink_to(real)
    elif how == "mode":
        entry.chmod(0o644)
    elif how == "owner":
        os.chown(entry, 12345, -1)
    elif how == "hard link":
        os.link(entry, entry.with_name("other"))
    elif how == "directory mode":
        entry.parent.chmod(0o777)
    elif how == "size":
        entry.write_bytes(entry.read_bytes() + b" " * guard_trust.ENTRY_LIMIT)
    return entry


@pytest.mark.parametrize("how", ["content", "link", "mode", "owner", "hard link", "directory mode", "size"])
def test_a_tampered_cache_is_ignored_and_the_signatures_are_verified_again(setup, how):
    if how == "owner" and os.geteuid() != 0:
        pytest.skip("chown needs root")
    sign(setup, "release", "sre")
    trust_verdict(setup)
    forge(setup, how)
    verdict, _ = trust_verdict(setup)
    assert verdict.in_effect and "signed by release, sre" in verdict.detail  # verified, not read from the cache


def test_a_forged_entry_never_passes_an_unsigned_or_tampered_lock(setup):
    sign(setup, "release", "sre")
    trust_verdict(setup)
    (entry,) = entries(setup)
    lock = setup["lock"]
    lock.write_text(lock.read_text().replace('"version": 7', '"version": 70'))  # other bytes: another key
    verdict, _ = trust_verdict(setup)
    assert verdict.detail.startswith("TAMPERED: ")
    for sig in lock.parent.glob("*.minisig"):
        sig.unlink()
    signed_key = guard_trust.cache_key(lock.read_bytes(), [], setup["policy"].read_bytes())
    entry.rename(entry.with_name(f"{signed_key}.json"))  # a well-formed entry for the unsigned bytes...
    entry.with_name(f"{signed_key}.json").write_bytes(guard_trust.entry_bytes(signed_key))
    verdict, _ = trust_verdict(setup)
    assert verdict.detail.startswith("UNSIGNED: ")  # ...is never read for a lock without signatures


def test_no_ready_dir_or_a_foreign_one_means_no_cache(setup, monkeypatch):
    sign(setup, "release", "sre")
    monkeypatch.delenv("HOTFIX_READY_DIR")
    assert trust_verdict(setup)[0].in_effect
    monkeypatch.setenv("HOTFIX_READY_DIR", "relative/dir")
    assert trust_verdict(setup)[0].in_effect and not Path("relative").exists()
    monkeypatch.setenv("HOTFIX_READY_DIR", str(setup["ready"]))
    (setup["ready"] / guard_trust.CACHE_DIR).symlink_to(setup["ready"])  # a link: not the directory
    for _ in range(2):
        verdict, _ = trust_verdict(setup)
        assert "signed by release, sre" in verdict.detail
    assert list(setup["ready"].glob("*.json")) == []


def test_an_expired_lock_is_never_served_from_the_cache(setup, monkeypatch):
    sign(setup, "release", "sre")
    assert trust_verdict(setup)[0].in_effect and entries(setup)
    import time

    later = time.time() + 200 * 365 * 86400  # after the lock's expires
    monkeypatch.setattr(time, "time", lambda: later)
    verdict, _ = trust_verdict(setup)
    assert verdict.detail.startswith("EXPIRED: ")


def test_the_chain_directory_is_part_of_the_key(setup, monkeypatch, tmp_path):
    sign(setup, "release", "sre")
    chain = tmp_path / "chain"
    chain.mkdir()
    monkeypatch.setenv("HOTFIX_TRUST_CHAIN", str(chain))
    trust_verdict(setup)
    (chain / "policy-99.toml").write_text("not read: no policy-2.toml before it")
    verdict, _ = trust_verdict(setup)
    assert "signed by release, sre" in verdict.detail  # another chain: verified again


def test_a_link_swapped_in_after_the_check_sends_no_write_elsewhere(setup, monkeypatch, tmp_path):
    """Issue 45: the ready directory is an emptyDir (0777): another user renames the checked trust-verdicts/
    away and plants a link to a root-only folder between the check and the write. The entry goes into the
    directory that was checked (its descriptor), never through the link."""
    sign(setup, "release", "sre")
    os.chmod(setup["ready"], 0o777)
    victim = tmp_path / "root-only"
    victim.mkdir(mode=0o700)
    real_cache_dir = guard_trust.cache_dir

    def checked_then_swapped():
        found = real_cache_dir()
        os.rename(found, setup["ready"] / "moved")
        (setup["ready"] / guard_trust.CACHE_DIR).symlink_to(victim)
        return found

    monkeypatch.setattr(guard_trust, "cache_dir", checked_then_swapped)
    assert trust_verdict(setup)[0].in_effect
    assert list(victim.iterdir()) == []
    assert len(list((setup["ready"] / "moved").glob("*.json"))) == 1


def test_the_policy_is_read_once_for_the_key_and_the_verdict(setup, monkeypatch):
    """Issue 45: the cache key and the verdict come from one read of the policy: a policy swapped after the
    key's read cannot have a verdict stored under the other policy's key."""
    sign(setup, "other")  # signed only by a key the policy does not list
    lax = setup["policy"].with_name("lax.toml")
    write_policy(lax, setup["keys"], threshold=1, names=("other",))
    from vllm_hotfix_guard.txn import signed

    real = signed.read_policy_bytes

    def read_then_swap(path):
        data = real(path)
        os.replace(lax, setup["policy"])  # the name now holds a policy that would accept the lock
        return data

    monkeypatch.setattr(signed, "read_policy_bytes", read_then_swap)
    verdict, _ = trust_verdict(setup)
    assert not verdict.in_effect and verdict.detail.startswith("UNTRUSTED"), verdict.detail
    assert entries(setup) == []
