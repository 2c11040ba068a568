"""Signed locks and catalogs through the real CLI, against the real `minisign` (Debian's package, installed by
.ci/run): keys made by `minisign -G`, locks signed by each side and verified by the other, every refusal of
`verify --lock` with its exit code, signed catalogs, and a rotation of the trust policy."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.manifests import manifest_data, write_manifest
from vllm_hotfix_guard.core import minisign
from vllm_hotfix_guard.txn import hotfix_lock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_hotfix_lock import make_lock  # noqa: E402

pytestmark = pytest.mark.tools

if shutil.which("minisign") is None:
    if os.environ.get("CI"):
        raise RuntimeError("minisign is not installed: .ci/run installs it (apt-get install minisign)")
    pytest.skip("minisign is not installed (apt-get install -y minisign)", allow_module_level=True)


def minisign_run(*args, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["minisign", *map(str, args)], capture_output=True, text=True, input=input, timeout=120)


class Key:
    def __init__(self, directory: Path, name: str, password: str | None = None):
        self.pub, self.key = directory / f"{name}.pub", directory / f"{name}.key"
        args = ["-G", "-f", "-p", self.pub, "-s", self.key] + ([] if password else ["-W"])
        done = minisign_run(*args, input=f"{password}\n{password}\n" if password else None)
        assert done.returncode == 0, done.stderr
        self.line = self.pub.read_text().splitlines()[1]
        self.printed_id = self.pub.read_text().splitlines()[0].split()[-1]  # "minisign public key <KEYID>"
        self.id = minisign.parse_public_key(self.line).id_text  # 16 digits; minisign 0.11 prints no leading zeros

    def sig(self, signed: Path) -> Path:
        return signed.parent / f"{signed.name}.{self.id}.minisig"


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    directory = tmp_path_factory.mktemp("keys")
    return {name: Key(directory, name) for name in ("release", "sre", "other")}


def write_policy(path: Path, keys, threshold=2, extra="", names=("release", "sre")) -> Path:
    body = f"threshold = {threshold}\n{extra}\n" + "".join(
        f'[[keys]]\nname = "{name}"\nminisign = "{keys[name].line}"\n' for name in names)
    path.write_text(body)
    return path


@pytest.fixture
def signed_dir(tmp_path, keys):
    return lock_and_policy(tmp_path, keys)


def lock_and_policy(tmp_path: Path, keys) -> Path:
    """tmp_path/export/hotfix.lock (version 7, expiring in 2099) and tmp_path/trust.toml (release + sre, 2)."""
    lock = make_lock()
    lock = hotfix_lock.Lock(site_packages=lock.site_packages, hotfixes=lock.hotfixes, version=7,
                         expires="2099-01-01T00:00:00Z")
    path = tmp_path / "export" / "hotfix.lock"
    path.parent.mkdir()
    path.write_bytes(hotfix_lock.dump_lock(lock))
    write_policy(tmp_path / "trust.toml", keys)
    return path


def verify(run_hotfix, lock: Path, *extra, env=None):
    return run_hotfix("verify", "--lock", lock, "--trust", lock.parent.parent / "trust.toml", *extra, env=env)


def printed_check(stdout: str) -> list[str]:
    """The `check: minisign ...` line `hotfix sign` printed, as the words a shell makes of it."""
    (line,) = [line for line in stdout.splitlines() if line.startswith("check: ")]
    return shlex.split(line[len("check: "):])


def test_hotfix_signs_what_minisign_verifies_and_the_reverse(run_hotfix, keys, signed_dir):
    done = run_hotfix("sign", signed_dir, "--key", keys["release"].key)
    assert done.returncode == 0, done.stderr
    sig = signed_dir.parent / "hotfix.lock.minisig"  # minisign's default name: one signer
    assert sig.is_file() and " -x " not in done.stdout
    checked = minisign_run("-V", "-H", "-m", signed_dir, "-p", keys["release"].pub)  # as the signing issue pastes it
    assert checked.returncode == 0 and "Signature and comment signature verified" in checked.stdout, checked.stderr
    assert "file:hotfix.lock\thashed" in checked.stdout  # minisign's own trusted comment, signed

    made = minisign_run("-S", "-s", keys["sre"].key, "-m", signed_dir, "-x", keys["sre"].sig(signed_dir),
                        "-t", "approved by the SRE on call")
    assert made.returncode == 0, made.stderr
    ok = verify(run_hotfix, signed_dir)
    assert "trusted: " in ok.stdout and "signed by release, sre (2 of threshold 2), version 7" in ok.stdout, ok.stderr


def test_a_second_signer_gets_a_file_of_its_own_and_each_printed_check_runs_as_pasted(run_hotfix, keys, signed_dir):
    """One signer: hotfix.lock.minisig, what `minisign -V -m LOCK -p PUB` reads; a second key: hotfix.lock.<KEYID>.minisig
    (minisign needs -x for it, and the printed check says so); the first key signing again keeps its file; both
    count, once each; the lock is never changed."""
    lock_bytes = signed_dir.read_bytes()
    checks = []
    for name in ("release", "sre", "release"):
        done = run_hotfix("sign", signed_dir, "--key", keys[name].key)
        assert done.returncode == 0, done.stderr
        checks.append(printed_check(done.stdout))
    assert sorted(p.name for p in signed_dir.parent.iterdir()) == ["hotfix.lock", f"hotfix.lock.{keys['sre'].id}.minisig",
                                                                   "hotfix.lock.minisig"]
    assert "-x" not in checks[0] and checks[1][checks[1].index("-x") + 1] == str(keys["sre"].sig(signed_dir))
    for words in checks:
        assert words[0] == "minisign"
        ran = subprocess.run(words, capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0 and "Signature and comment signature verified" in ran.stdout, ran.stderr
    assert minisign_run("-V", "-m", signed_dir, "-p", keys["sre"].pub).returncode == 1  # hotfix.lock.minisig is release's
    ok = verify(run_hotfix, signed_dir)  # trusted; then exit 3 as no vLLM is there to check it against
    assert ok.stdout.startswith("trusted: ") and "signed by release, sre (2 of threshold 2)" in ok.stdout, ok.stdout
    assert "does not count" not in ok.stderr and signed_dir.read_bytes() == lock_bytes


def test_an_old_per_key_signature_counts_and_moves_to_the_default_name_when_its_key_signs_again(run_hotfix, keys,
                                                                                                 signed_dir):
    """Signatures named as `hotfix sign` named them before (hotfix.lock.<KEYID>.minisig) still count; the same
    key signing again writes hotfix.lock.minisig and removes its old file (a dry run says so, changes nothing)."""
    for name in ("release", "sre"):
        assert minisign_run("-S", "-s", keys[name].key, "-m", signed_dir, "-x", keys[name].sig(signed_dir)).returncode == 0
    assert verify(run_hotfix, signed_dir).stdout.startswith("trusted: ")
    before = {p.name: p.read_bytes() for p in signed_dir.parent.iterdir()}
    dry = run_hotfix("sign", signed_dir, "--key", keys["release"].key, "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["replaced"] == str(keys["release"].sig(signed_dir))
    assert {p.name: p.read_bytes() for p in signed_dir.parent.iterdir()} == before
    done = run_hotfix("sign", signed_dir, "--key", keys["release"].key)
    assert done.returncode == 0 and "removed " in done.stdout, done.stdout + done.stderr
    assert sorted(p.name for p in signed_dir.parent.iterdir()) == ["hotfix.lock", f"hotfix.lock.{keys['sre'].id}.minisig",
                                                                   "hotfix.lock.minisig"]
    assert minisign_run("-V", "-m", signed_dir, "-p", keys["release"].pub).returncode == 0
    after = verify(run_hotfix, signed_dir)
    assert after.stdout.startswith("trusted: ") and "does not count" not in after.stderr


def test_a_default_signature_file_that_is_not_one_is_never_overwritten(run_hotfix, keys, signed_dir):
    junk = signed_dir.parent / "hotfix.lock.minisig"
    junk.write_bytes(b"not a signature\n")
    done = run_hotfix("sign", signed_dir, "--key", keys["release"].key)
    assert done.returncode == 0 and junk.read_bytes() == b"not a signature\n"
    assert keys["release"].sig(signed_dir).is_file() and " -x " in done.stdout


@pytest.mark.parametrize("case, code, words", [
    ("unsigned", 11, "UNSIGNED: "),
    ("one key", 12, "UNTRUSTED: "),
    ("unlisted key", 12, "UNTRUSTED: "),
    ("tampered", 13, "TAMPERED: "),
    ("rollback", 14, "ROLLBACK: "),
    ("expired", 15, "EXPIRED: "),
])
def test_every_refusal_has_its_line_and_exit_code(run_hotfix, keys, signed_dir, case, code, words):
    lock = signed_dir
    signers = {"unsigned": (), "one key": ("release",), "unlisted key": ("release", "other")}.get(case, ("release", "sre"))
    if case == "expired":
        data = json.loads(lock.read_text())
        data["expires"] = "2020-01-01T00:00:00Z"
        lock.write_text(json.dumps(data))
    for name in signers:
        assert run_hotfix("sign", lock, "--key", keys[name].key).returncode == 0
    if case == "tampered":
        lock.write_text(lock.read_text().replace('"version": 7', '"version": 70'))
    if case == "rollback":
        write_policy(lock.parent.parent / "trust.toml", keys, extra="min_version = 8")
    done = verify(run_hotfix, lock)
    assert done.returncode == code, done.stdout + done.stderr
    assert done.stdout.startswith(words), done.stdout
    as_json = verify(run_hotfix, lock, "--json")
    assert as_json.returncode == code
    report = json.loads(as_json.stdout)["trust"]
    assert report["trusted"] is False and report["exit_code"] == code and report["refusals"][0]["line"].startswith(words)


def test_expired_within_the_grace_warns(run_hotfix, keys, signed_dir):
    data = json.loads(signed_dir.read_text())
    data["expires"] = "2020-01-01T00:00:00Z"
    signed_dir.write_text(json.dumps(data))
    for name in ("release", "sre"):
        run_hotfix("sign", signed_dir, "--key", keys[name].key)
    write_policy(signed_dir.parent.parent / "trust.toml", keys, extra='expired = "warn"')
    done = verify(run_hotfix, signed_dir)
    assert "hotfix: EXPIRED: " in done.stderr and "trusted: " in done.stdout


def test_a_legacy_signature_does_not_count(run_hotfix, keys, signed_dir):
    run_hotfix("sign", signed_dir, "--key", keys["release"].key)
    made = minisign_run("-S", "-l", "-s", keys["sre"].key, "-m", signed_dir, "-x", keys["sre"].sig(signed_dir))
    assert made.returncode == 0, made.stderr
    done = verify(run_hotfix, signed_dir)
    assert done.returncode == 12 and "legacy (non-prehashed, minisign -l)" in done.stderr


def test_an_invalid_policy_names_the_key_path(run_hotfix, keys, signed_dir):
    write_policy(signed_dir.parent.parent / "trust.toml", keys, threshold=3)
    done = verify(run_hotfix, signed_dir)
    assert done.returncode == 8 and "trust.toml: threshold: 3 signatures needed but only 2 key(s) listed" in done.stderr


@pytest.mark.slow
def test_an_encrypted_key_signs_with_its_password_from_a_file_or_the_environment(run_hotfix, tmp_path, keys, signed_dir):
    locked = Key(tmp_path, "encrypted", password="correct horse")
    password_file = tmp_path / "password"
    password_file.write_text("correct horse\n")
    done = run_hotfix("sign", signed_dir, "--key", locked.key, env={"HOTFIX_KEY_PASSWORD_FILE": str(password_file)})
    assert done.returncode == 0, done.stderr
    assert minisign_run("-V", "-m", signed_dir, "-p", locked.pub).returncode == 0
    wrong = run_hotfix("sign", signed_dir, "--key", locked.key, env={"HOTFIX_KEY_PASSWORD": "wrong"})
    assert wrong.returncode == 3 and "wrong password for that key" in wrong.stderr
    nobody = run_hotfix("sign", signed_dir, "--key", locked.key, input="", process=True)  # stdin a pipe, no terminal
    assert nobody.returncode == 2 and "no terminal is there to ask its password" in nobody.stderr


def test_a_signed_catalog_is_refused_once_changed(run_hotfix, keys, tmp_path):
    catalog = tmp_path / "catalog"
    write_manifest(catalog, manifest_data(id="demo-fix", version=2), name="demo-fix")
    write_policy(tmp_path / "trust.toml", keys, threshold=1, extra='catalogs = "signed"')
    trust_env = {"HOTFIX_TRUST": str(tmp_path / "trust.toml")}
    unsigned = run_hotfix("list", "--catalog", catalog, env=trust_env)
    assert unsigned.returncode == 11 and "UNSIGNED: catalog" in unsigned.stderr
    assert run_hotfix("sign", "--catalog", catalog, "--key", keys["release"].key).returncode == 0
    sums = catalog / "hotfix-catalog.sha256"
    assert subprocess.run(["sha256sum", "-c", "--strict", "--quiet", sums.name], cwd=catalog).returncode == 0
    assert minisign_run("-V", "-m", sums, "-p", keys["release"].pub).returncode == 0  # hotfix-catalog.sha256.minisig
    listed = run_hotfix("list", "--catalog", catalog, env=trust_env)
    assert listed.returncode == 0 and "demo-fix" in listed.stdout, listed.stderr
    assert run_hotfix("list", "--catalog", catalog).returncode == 0  # no policy: as before
    manifest = next((catalog / "manifests").glob("*.toml"))
    manifest.write_text(manifest.read_text().replace("demo", "dem0", 1))
    changed = run_hotfix("list", "--catalog", catalog, "--trust", tmp_path / "trust.toml")
    assert changed.returncode == 13 and "changed after signing" in changed.stderr
    manifest.unlink()
    (catalog / "patches" / "planted.patch").write_text("x")
    planted = run_hotfix("check-catalog", "--catalog", catalog, env=trust_env)
    assert planted.returncode == 13 and "planted.patch is not in the signed list" in planted.stderr


def test_rotation_replaces_the_policy_and_the_old_keys_stop_counting(run_hotfix, keys, signed_dir, tmp_path):
    current = tmp_path / "trust.toml"
    new = write_policy(tmp_path / "trust-v2.toml", keys, threshold=1, extra="version = 2", names=("other",))
    refused = run_hotfix("trust", "rotate", new, "--trust", current)
    assert refused.returncode == 11 and refused.stdout.startswith("UNSIGNED: ")
    for name in ("release", "sre"):
        assert run_hotfix("sign", new, "--key", keys[name].key).returncode == 0
    unproven = run_hotfix("trust", "rotate", new, "--trust", current)
    assert unproven.returncode == 12 and "(by its own keys)" in unproven.stdout  # the new key must sign too
    run_hotfix("sign", new, "--key", keys["other"].key)
    before = current.read_bytes()
    dry = run_hotfix("trust", "rotate", new, "--trust", current, "--dry-run")
    assert dry.returncode == 0 and current.read_bytes() == before and "would replace" in dry.stdout
    chain = tmp_path / "chain"
    done = run_hotfix("trust", "rotate", new, "--trust", current, "--chain", chain)
    assert done.returncode == 0, done.stdout + done.stderr
    assert current.read_bytes() == new.read_bytes() and "keys that stop counting: release, sre" in done.stdout
    assert (chain / "policy-2.toml").read_bytes() == new.read_bytes()
    assert sorted(p.name for p in chain.iterdir()) == sorted(
        ["policy-2.toml", "policy-2.toml.minisig"] + [f"policy-2.toml.{keys[n].id}.minisig" for n in ("sre", "other")])

    for name in ("release", "sre"):
        run_hotfix("sign", signed_dir, "--key", keys[name].key)
    old_keys = verify(run_hotfix, signed_dir)
    assert old_keys.returncode == 12, old_keys.stdout + old_keys.stderr
    run_hotfix("sign", signed_dir, "--key", keys["other"].key)
    assert "trusted: " in verify(run_hotfix, signed_dir).stdout
    again = run_hotfix("trust", "rotate", new, "--trust", current)
    assert again.returncode == 14 and "is not above the current policy's 2" in again.stdout


def test_a_pinned_policy_walks_its_chain_and_cannot_be_named_away(run_hotfix, keys, tmp_path):
    from vllm_hotfix_guard.errors import Untrusted, UsageError
    from vllm_hotfix_guard.txn import signed

    pinned = write_policy(tmp_path / "pinned.toml", keys)
    chain = tmp_path / "chain"
    chain.mkdir()
    step = write_policy(chain / "policy-2.toml", keys, threshold=1, extra="version = 2", names=("other",))
    for name in ("release", "sre", "other"):
        run_hotfix("sign", step, "--key", keys[name].key)
    walked = signed.load_policy(now=0, env={"HOTFIX_TRUST_CHAIN": str(chain)}, pinned=str(pinned))
    assert walked.version == 2 and [k.name for k in walked.keys] == ["other"]
    with pytest.raises(UsageError, match="pins its trust policy"):
        signed.load_policy(now=0, env={"HOTFIX_TRUST": str(tmp_path / "mine.toml")}, pinned=str(pinned))
    keys["sre"].sig(step).unlink()  # a step its predecessor's threshold did not sign stops the walk: refused
    with pytest.raises(Untrusted) as caught:
        signed.load_policy(now=0, env={"HOTFIX_TRUST_CHAIN": str(chain)}, pinned=str(pinned))
    assert caught.value.exit_code == 12


def test_a_policy_others_can_write_is_refused(run_hotfix, keys, signed_dir):
    policy = signed_dir.parent.parent / "trust.toml"
    policy.chmod(0o666)
    done = verify(run_hotfix, signed_dir)
    assert done.returncode == 3 and "writable by others" in done.stderr


def test_sign_refuses_what_is_not_a_lock_and_writes_nothing_on_a_dry_run(run_hotfix, keys, tmp_path, signed_dir):
    bad = tmp_path / "hotfix.lock"
    bad.write_text("{}")
    done = run_hotfix("sign", bad, "--key", keys["release"].key)
    assert done.returncode == 8 and not list(tmp_path.glob("*.minisig"))
    dry = run_hotfix("sign", signed_dir, "--key", keys["release"].key, "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["dry_run"] is True
    assert not list(signed_dir.parent.glob("*.minisig"))
    public = run_hotfix("sign", signed_dir, "--key", keys["release"].pub)
    assert public.returncode == 8 and "looks like a public key" in public.stderr


def test_signature_file_names():
    key_id = bytes.fromhex("fefbff69e18e8cd0")
    assert minisign.signature_name("hotfix.lock", key_id) == "hotfix.lock.D08C8EE169FFFBFE.minisig"
    assert minisign.is_signature_name("hotfix.lock.minisig", "hotfix.lock")
    assert minisign.is_signature_name("hotfix.lock.D08C8EE169FFFBFE.minisig", "hotfix.lock")
    assert not minisign.is_signature_name("hotfix.lock.d08c8ee169fffbfe.minisig", "hotfix.lock")
    assert not minisign.is_signature_name("hotfix.lock.x.minisig", "hotfix.lock")
    assert minisign.is_signature_name("hotfix.lock.61605C98D8C4725.minisig", "hotfix.lock")  # minisign 0.11's id
    assert not minisign.is_signature_name("hotfix.lock.0061605C98D8C4725.minisig", "hotfix.lock")


def test_a_signature_named_as_minisign_prints_the_key_id_counts(run_hotfix, keys, signed_dir):
    for name in ("release", "sre"):
        made = minisign_run("-S", "-s", keys[name].key, "-m", signed_dir,
                            "-x", signed_dir.parent / f"hotfix.lock.{keys[name].printed_id}.minisig")
        assert made.returncode == 0, made.stderr
    assert "trusted: " in verify(run_hotfix, signed_dir).stdout


@pytest.mark.real
def test_on_a_real_vllm_export_sign_verify_and_tamper(run_hotfix, keys, vllm_install, tmp_path):
    """The whole path on the real vLLM 0.30.0 wheel: export sets version and expiry, two keys sign (hotfix and
    minisign), `verify --lock` is trusted and in effect; a lock edited after signing is refused (13)."""
    venv = vllm_install("0.30.0")
    export = tmp_path / "export"
    done = run_hotfix("export", "mamba-align-block-size", "--to", export, "--python", venv.python,
                      "--lock-version", "7", "--expires", "30d")
    assert done.returncode == 0, done.stderr
    lock = export / "hotfix.lock"
    data = json.loads(lock.read_text())
    assert data["version"] == 7 and data["expires"].endswith("Z")
    again = run_hotfix("export", "mamba-align-block-size", "--to", export, "--python", venv.python, "--lock-version", "7")
    assert again.returncode == 3 and "already version 7" in again.stderr
    run_hotfix("sign", lock, "--key", keys["release"].key)
    assert minisign_run("-S", "-s", keys["sre"].key, "-m", lock, "-x", keys["sre"].sig(lock)).returncode == 0
    write_policy(tmp_path / "trust.toml", keys, extra="min_version = 7")
    path = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
    shutil.copyfile(export / "mamba-align-block-size" / path, venv.site_packages / path)  # the bind mount
    ok = run_hotfix("verify", "--lock", lock, "--python", venv.python, "--trust", tmp_path / "trust.toml", "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (entry,) = json.loads(ok.stdout)
    assert entry["state"] == "applied" and entry["trust"]["signers"] == ["release", "sre"]
    lock.write_text(lock.read_text().replace('"version": 7', '"version": 9'))
    tampered = run_hotfix("verify", "--lock", lock, "--python", venv.python, env={"HOTFIX_TRUST": str(tmp_path / "trust.toml")})
    assert tampered.returncode == 13 and tampered.stdout.startswith("TAMPERED: ")


def test_verify_with_a_policy_imports_neither_cryptography_nor_a_toml_library(keys, signed_dir):
    """`verify --lock` runs at every container start and the guard in every vLLM process: the verifier is
    the stdlib's (core.ed25519), the policy's reader ours (core.policytoml)."""
    for name in ("release", "sre"):
        minisign_run("-S", "-s", keys[name].key, "-m", signed_dir, "-x", keys[name].sig(signed_dir))
    probe = ("import sys\nfrom vllm_hotfix.cli import _run\n"
             f"code = _run(['verify', '--lock', {str(signed_dir)!r}, '--trust', {str(signed_dir.parent.parent / 'trust.toml')!r}])\n"
             "print([m for m in ('cryptography', 'tomllib', 'tomli') if m in sys.modules])\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert "trusted: " in done.stdout and done.stdout.strip().endswith("[]"), done.stdout + done.stderr


def test_a_catalog_flipped_between_nothing_and_unsigned_is_never_used(run_hotfix, keys, tmp_path):
    """Issue 45: with catalogs = "signed" the check was skipped when the path was not a directory at that
    instant, and the catalog then read by name again: each run must refuse (2: not there, 8: it went away
    while read, 11: unsigned), never list the unsigned hotfix, never exit 70."""
    import threading

    unsigned = tmp_path / "unsigned"
    write_manifest(unsigned, manifest_data(id="demo-fix", version=2), name="demo-fix")
    catalog = tmp_path / "catalog"
    policy = write_policy(tmp_path / "trust.toml", keys, threshold=1, extra='catalogs = "signed"')
    stop = threading.Event()

    def flip():
        while not stop.is_set():
            unsigned.rename(catalog)
            catalog.rename(unsigned)

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        for _ in range(20):
            done = run_hotfix("list", "--catalog", catalog, "--trust", policy)
            assert done.returncode in (2, 8, 11) and "demo-fix" not in done.stdout, (done.returncode, done.stderr)
            assert "Traceback" not in done.stderr
    finally:
        stop.set()
        flipper.join()
    assert (unsigned / "manifests").is_dir() and not catalog.exists()


def test_a_signed_catalog_is_loaded_from_the_bytes_its_verdict_judged(keys, tmp_path, monkeypatch, run_hotfix):
    """The catalog is read once: a manifest swapped right after the verdict read it is not the one loaded."""
    from vllm_hotfix.catalog import index
    from vllm_hotfix_guard.txn import catalog_sums as sums

    catalog = tmp_path / "catalog"
    write_manifest(catalog, manifest_data(id="demo-fix", version=2), name="demo-fix")
    policy = write_policy(tmp_path / "trust.toml", keys, threshold=1, extra='catalogs = "signed"')
    assert run_hotfix("sign", "--catalog", catalog, "--key", keys["release"].key).returncode == 0
    manifest = next((catalog / "manifests").glob("*.toml"))
    real = sums.catalog_files

    def read_then_swap(directory):
        files = real(directory)
        manifest.write_text(manifest.read_text().replace("version = 2", "version = 3"))
        return files

    monkeypatch.setattr(sums, "catalog_files", read_then_swap)
    loaded = index.Catalog.load([catalog], env={"HOTFIX_TRUST": str(policy)})
    assert [str(m.version) for m in loaded.all() if m.id == "demo-fix"] == ["2"]


def test_a_policy_swapped_between_its_read_and_its_check_never_trusts(run_hotfix, keys, signed_dir, tmp_path):
    """Issue 45: the policy was read by name, then stat'ed by name again: a link flipped between a strict
    policy (owned, 0644) and a loose one (group-writable, listing the signer) got a lock signed only by an
    unlisted key accepted. Now the bytes and the owner check come from one descriptor: 12 or 3, never 0."""
    import threading

    key = keys["other"]
    assert minisign_run("-S", "-s", key.key, "-m", signed_dir, "-x", key.sig(signed_dir)).returncode == 0
    strict = write_policy(tmp_path / "strict.toml", keys, threshold=1)
    loose = write_policy(tmp_path / "loose.toml", keys, threshold=1, names=("other",))
    os.chmod(loose, 0o664)
    link = tmp_path / "trust.link"
    link.symlink_to(strict)  # there before the first run: the flipper replaces it atomically from then on
    stop = threading.Event()

    def flip():
        while not stop.is_set():
            for target in (strict, loose):
                tmp = tmp_path / "trust.link.tmp"
                tmp.unlink(missing_ok=True)
                tmp.symlink_to(target)
                os.replace(tmp, link)

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        for _ in range(20):
            done = run_hotfix("verify", "--lock", signed_dir, "--trust", link)
            assert done.returncode in (3, 12), (done.returncode, done.stdout, done.stderr)
    finally:
        stop.set()
        flipper.join()


def test_one_key_under_two_key_ids_is_refused_and_counts_once(run_hotfix, keys, signed_dir, tmp_path):
    """Issue 45: the key id is not signed, so one key listed under two ids counted twice toward a threshold
    (one signature, its key id bytes rewritten, made two); `trust rotate` accepted such a policy. The policy
    reader refuses it (exit 8, the key path), and a threshold counts distinct public keys."""
    import base64

    from vllm_hotfix_guard.core import trust_policy

    release = keys["release"]
    raw = base64.b64decode(release.line)
    twin = base64.b64encode(raw[:2] + bytes(8) + raw[10:]).decode()  # the same key, another id
    policy = tmp_path / "twin.toml"
    policy.write_text(f'threshold = 2\n[[keys]]\nname = "a"\nminisign = "{release.line}"\n'
                      f'[[keys]]\nname = "b"\nminisign = "{twin}"\n')
    before = signed_dir.read_bytes()
    done = run_hotfix("verify", "--lock", signed_dir, "--trust", policy)
    assert done.returncode == 8 and "keys[1].minisign: the public key of keys[0] under another key id" in done.stderr
    rotate = run_hotfix("trust", "rotate", policy, "--trust", signed_dir.parent.parent / "trust.toml")
    assert rotate.returncode == 8 and "another key id" in rotate.stderr
    assert signed_dir.read_bytes() == before
    # the count itself, on a policy built past the reader: one valid signature under both ids counts once
    good = trust_policy.parse_policy(f'threshold = 1\n[[keys]]\nname = "a"\nminisign = "{release.line}"\n'.encode(), "p")
    doubled = trust_policy.Policy(**{**good.as_dict(),
                                     "threshold": 2, "keys": good.keys + (trust_policy.TrustedKey(
                                         name="b", key=good.keys[0].key.__class__(key_id=bytes(8),
                                                                                   key=good.keys[0].key.key)),)})
    assert minisign_run("-S", "-s", release.key, "-m", signed_dir, "-x", release.sig(signed_dir)).returncode == 0
    sig = release.sig(signed_dir).read_bytes()
    lines = sig.split(b"\n")
    forged_raw = base64.b64decode(lines[1])
    forged = lines[0] + b"\n" + base64.b64encode(forged_raw[:2] + bytes(8) + forged_raw[10:]) + b"\n" + b"\n".join(lines[2:])
    verdict = trust_policy.evaluate(signed_dir.read_bytes(), [("a.minisig", sig), ("b.minisig", forged)], doubled,
                                    now=0, subject="lock", versioned=False)
    assert verdict.signers == ("a",) and not verdict.trusted
