"""The catalog as a feed through the real CLI: `catalog publish` (byte-reproducible, signed, the version only
grows), `catalog add` / `update` from a real HTTPS server on 127.0.0.1 (a certificate from a throwaway CA),
and every refusal -- replayed, same version with other bytes, expired (freeze), tampered metadata, archive
or file, under the threshold, unsigned, unsafe archive members, unreachable -- with its documented exit
code and the cached copy byte-identical."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import time
from pathlib import Path

import pytest

from fixtures.feed import HttpsServer, Key, make_ca, tree_bytes, write_policy
from fixtures.manifests import manifest_data, write_manifest
from vllm_hotfix.catalog import release as release_format
from vllm_hotfix.catalog.release_archive import build_archive
from vllm_hotfix.core import signing
from vllm_hotfix_guard.core import minisign


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    directory = tmp_path_factory.mktemp("keys")
    return {name: Key(directory, name) for name in ("release", "sre", "other")}


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_ca(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def feed(tmp_path, keys, tls):
    """A served directory (tmp_path/www), a catalog (tmp_path/catalog: team-fix) and a policy (release + sre, 2)."""
    www = tmp_path / "www"
    www.mkdir()
    write_manifest(tmp_path / "catalog", manifest_data(id="team-fix", version=1, supersedes=[]), name="team-fix")
    write_policy(tmp_path / "trust.toml", keys, ("release", "sre"), 2)
    server = HttpsServer(www, tls[1], tls[2])
    yield server
    server.close()


def publish(run_hotfix, tmp_path, keys, out, *extra, names=("release", "sre")):
    args = ["catalog", "publish", tmp_path / "catalog", "--to", out, *extra]
    for name in names:
        args += ["--key", keys[name].key]
    done = run_hotfix(*args)
    assert done.returncode == 0, done.stderr
    return done


def serve(out: Path, www: Path) -> None:
    """Put the release in ``out`` on the server (the served directory replaced)."""
    for child in www.iterdir():
        child.unlink()
    for child in out.iterdir():
        shutil.copy2(child, www / child.name)


def add(run_hotfix, feed, tmp_path, tls, name="team"):
    return run_hotfix("catalog", "add", name, feed.url, "--trust", tmp_path / "trust.toml", "--ca", tls[0])


def cache(state: Path, name="team") -> Path:
    return state / "feeds" / name / "release"


def craft(www: Path, files: dict, keys, names, *, version: int, expires="2099-01-01T00:00:00Z", archive=None,
          metadata=None) -> None:
    """A release made by hand (an old publisher, an attacker holding some keys): ``archive`` replaces the real
    archive's bytes before the metadata is made over it, ``metadata`` edits the document before it is signed."""
    for child in www.iterdir():
        child.unlink()
    body = archive if archive is not None else build_archive(files)
    digest = hashlib.sha256(body).hexdigest()
    doc = {"schema": 1, "kind": release_format.KIND, "version": version, "expires": expires,
           "archive": {"name": release_format.archive_name(digest), "sha256": digest, "size": len(body)},
           "files": {p: {"sha256": hashlib.sha256(b).hexdigest(), "size": len(b)} for p, b in files.items()}}
    if metadata:
        metadata(doc)
    data = release_format.dump(doc)
    (www / release_format.METADATA).write_bytes(data)
    (www / release_format.archive_name(digest)).write_bytes(body)
    for name in names:
        key = signing.unseal(signing.parse_secret_key(keys[name].key.read_bytes(), "k"), None, "k")
        made = signing.sign(data, key, trusted_comment=f"version:{version}")
        (www / minisign.signature_name(release_format.METADATA, key.key_id)).write_bytes(minisign.format_signature(made))


def catalog_files(tmp_path: Path) -> dict:
    from vllm_hotfix_guard.txn.catalog_sums import catalog_files as read

    return read(tmp_path / "catalog")


def test_publish_is_byte_reproducible_signed_and_its_version_only_grows(run_hotfix, tmp_path, keys, feed):
    fixed = ("--expires", "2099-01-01T00:00:00Z")
    publish(run_hotfix, tmp_path, keys, tmp_path / "one", *fixed)
    publish(run_hotfix, tmp_path, keys, tmp_path / "two", *fixed)
    assert tree_bytes(tmp_path / "one") == tree_bytes(tmp_path / "two")
    data = (tmp_path / "one" / "release.json").read_bytes()
    release = release_format.parse(data, "release.json")
    assert release.version == 1 and release.expires == "2099-01-01T00:00:00Z"
    # the first key's signature has minisign's default name, a further key's its own (core/minisign.placed_name)
    assert sorted(p.name for p in (tmp_path / "one").glob("*.minisig")) == sorted(
        ["release.json.minisig", f"release.json.{keys['sre'].id}.minisig"])
    for name, file in (("release", "release.json.minisig"), ("sre", f"release.json.{keys['sre'].id}.minisig")):
        sig = minisign.parse_signature((tmp_path / "one" / file).read_bytes())
        assert minisign.check(sig, keys[name].public, data) == minisign.VALID
    archive = (tmp_path / "one" / release.archive_name).read_bytes()
    assert hashlib.sha256(archive).hexdigest() == release.archive_sha256
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(catalog_files(tmp_path))
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) for m in members} == {(0, 0, 0, "", "", 0o644)}
    second = publish(run_hotfix, tmp_path, keys, tmp_path / "one", "--json")
    assert json.loads(second.stdout)["version"] == 2 and json.loads(second.stdout)["previous"] == 1
    assert sorted(os.listdir(tmp_path / "one")) == sorted(json.loads(second.stdout)["written"])
    for twice in (("release", "release"), ("release", "sre", "sre")):  # the default name's key, a further key's
        again = run_hotfix("catalog", "publish", tmp_path / "catalog", "--to", tmp_path / "twice", *(
            a for name in twice for a in ("--key", keys[name].key)))
        assert again.returncode == 2 and "the same key twice" in again.stderr and not (tmp_path / "twice").exists()
    lower = run_hotfix("catalog", "publish", tmp_path / "catalog", "--to", tmp_path / "one", "--key", keys["release"].key,
                       "--version", "2")
    assert lower.returncode == 3 and "only grows" in lower.stderr
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    refused = run_hotfix("catalog", "publish", tmp_path / "catalog", "--to", tmp_path / "mine", "--key", keys["release"].key)
    assert refused.returncode == 3 and (tmp_path / "mine" / "notes.txt").read_text() == "mine"
    past = run_hotfix("catalog", "publish", tmp_path / "catalog", "--to", tmp_path / "x", "--key", keys["release"].key,
                      "--expires", "2001-01-01T00:00:00Z")
    assert past.returncode == 2 and "already past" in past.stderr


@pytest.mark.slow
def test_a_subscribed_host_picks_up_a_new_release_with_one_update(run_hotfix, tmp_path, keys, feed, tls,
                                                                  _isolated_state):
    publish(run_hotfix, tmp_path, keys, tmp_path / "out")
    serve(tmp_path / "out", tmp_path / "www")
    untrusted_tls = run_hotfix("catalog", "add", "team", feed.url, "--trust", tmp_path / "trust.toml")
    assert untrusted_tls.returncode == 10 and "TLS verification failed" in untrusted_tls.stderr
    assert not (_isolated_state / "feeds" / "team").exists()
    added = add(run_hotfix, feed, tmp_path, tls)
    assert added.returncode == 0 and "release 1" in added.stdout and "signed by release, sre" in added.stdout
    listed = run_hotfix("list", "--json")
    assert any(h["id"] == "team-fix" for h in json.loads(listed.stdout)), listed.stdout
    assert "From: subscribed catalog team " in run_hotfix("show", "team-fix").stdout
    write_manifest(tmp_path / "catalog", manifest_data(id="team-fix2", version=1, supersedes=[]), name="team-fix2")
    publish(run_hotfix, tmp_path, keys, tmp_path / "out")
    serve(tmp_path / "out", tmp_path / "www")
    updated = run_hotfix("catalog", "update", env={"REQUESTS_CA_BUNDLE": str(tls[0])})
    assert updated.returncode == 0 and "updated from release 1 to release 2" in updated.stdout, updated.stderr
    assert "team-fix2" in run_hotfix("list").stdout
    again = run_hotfix("catalog", "update", "team", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)[0]["status"] == "current"
    shown = json.loads(run_hotfix("catalog", "list", "--json").stdout)
    assert shown[0]["release"]["version"] == 2 and shown[0]["stale"] is False


REFUSALS = {
    # name: (how the served release is made, exit code, words)
    "replayed": (lambda www, files, keys: craft(www, files, keys, ("release", "sre"), version=1), 14,
                 "ROLLBACK: catalog team"),
    "same-version-other-bytes": (lambda www, files, keys: craft(www, {**files, "patches/x.patch": b"x"}, keys,
                                                                ("release", "sre"), version=2), 14, "must grow"),
    "expired": (lambda www, files, keys: craft(www, files, keys, ("release", "sre"), version=3,
                                               expires="2020-01-01T00:00:00Z"), 15, "EXPIRED: catalog team"),
    "under-threshold": (lambda www, files, keys: craft(www, files, keys, ("release",), version=3), 12,
                        "UNTRUSTED: catalog team"),
    "unlisted-second-key": (lambda www, files, keys: craft(www, files, keys, ("release", "other"), version=3), 12,
                            "UNTRUSTED"),
    "unsigned": (lambda www, files, keys: craft(www, files, keys, (), version=3), 11, "UNSIGNED"),
    "tampered-file": (lambda www, files, keys: craft(
        www, files, keys, ("release", "sre"), version=3,
        archive=build_archive({**files, "manifests/team-fix.toml": files["manifests/team-fix.toml"] + b"# x\n"})),
        13, "manifests/team-fix.toml changed after signing"),
    "planted-file": (lambda www, files, keys: craft(
        www, files, keys, ("release", "sre"), version=3,
        archive=build_archive({**files, "patches/planted.patch": b"x"})), 13, "not in the signed list"),
}


def _link_archive(files: dict) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for path, body in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
        link = tarfile.TarInfo("patches/evil")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    return raw.getvalue()


REFUSALS["link-member"] = (lambda www, files, keys: craft(www, files, keys, ("release", "sre"), version=3,
                                                          archive=_link_archive(files)), 8, "is a link")


def _dotdot_archive(files: dict) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for path, body in {**files, "patches/../../escape.toml": b"x"}.items():
            info = tarfile.TarInfo(path)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return raw.getvalue()


REFUSALS["dotdot-member"] = (lambda www, files, keys: craft(www, files, keys, ("release", "sre"), version=3,
                                                            archive=_dotdot_archive(files)), 8, "unsafe name")


def _one_key_twice(www: Path, files: dict, keys) -> None:
    craft(www, files, keys, ("release",), version=3)
    signed = www / f"release.json.{keys['release'].id}.minisig"
    (www / "release.json.minisig").write_bytes(signed.read_bytes())  # minisign's default name, the same key


REFUSALS["one-key-twice"] = (_one_key_twice, 12, "UNTRUSTED: catalog team")
REFUSALS["shadows-builtin"] = (lambda www, files, keys: craft(
    www, {**files, "manifests/x.toml": files["manifests/team-fix.toml"].replace(b'"team-fix"', b'"mamba-align-block-size"')
                                      .replace(b"\nversion = 1\n", b"\nversion = 9\n")},
    keys, ("release", "sre"), version=3), 8, "redefines the built-in hotfix mamba-align-block-size")


@pytest.mark.slow  # ~5 s a case: a publish, an add and an update over HTTPS, each a CLI process
@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_each_refused_update_has_its_exit_code_and_leaves_the_cache_byte_identical(
        run_hotfix, tmp_path, keys, feed, tls, _isolated_state, case):
    publish(run_hotfix, tmp_path, keys, tmp_path / "out", "--version", "2")
    serve(tmp_path / "out", tmp_path / "www")
    assert add(run_hotfix, feed, tmp_path, tls).returncode == 0
    before = tree_bytes(cache(_isolated_state))
    make, code, words = REFUSALS[case]
    make(tmp_path / "www", catalog_files(tmp_path), keys)
    refused = run_hotfix("catalog", "update", "team")
    assert refused.returncode == code and words in refused.stderr, (refused.returncode, refused.stderr)
    assert refused.stderr.count("hotfix: error:") == 1
    assert tree_bytes(cache(_isolated_state)) == before
    assert sorted(os.listdir(_isolated_state / "feeds" / "team")) == ["release", "subscription.json"]
    assert "team-fix" in run_hotfix("list").stdout  # the cached copy still serves


@pytest.mark.slow
def test_tampered_metadata_is_refused(run_hotfix, tmp_path, keys, feed, tls, _isolated_state):
    publish(run_hotfix, tmp_path, keys, tmp_path / "out")
    serve(tmp_path / "out", tmp_path / "www")
    assert add(run_hotfix, feed, tmp_path, tls).returncode == 0
    before = tree_bytes(cache(_isolated_state))
    publish(run_hotfix, tmp_path, keys, tmp_path / "out")
    serve(tmp_path / "out", tmp_path / "www")
    metadata = tmp_path / "www" / "release.json"
    metadata.write_bytes(metadata.read_bytes().replace(b'"version": 2', b'"version": 9'))
    refused = run_hotfix("catalog", "update", "--json")
    assert refused.returncode == 13, refused.stdout
    assert json.loads(refused.stdout)[0]["error"]["exit_code"] == 13
    assert tree_bytes(cache(_isolated_state)) == before


@pytest.mark.slow
@pytest.mark.slow
def test_offline_the_cache_serves_until_it_expires_then_it_is_stale(run_hotfix, tmp_path, keys, feed, tls,
                                                                    _isolated_state):
    expires_at = time.time() + 20  # room for four CLI runs on a loaded machine (4 s was not, at load 9)
    publish(run_hotfix, tmp_path, keys, tmp_path / "out", "--expires", "20s")
    serve(tmp_path / "out", tmp_path / "www")
    assert add(run_hotfix, feed, tmp_path, tls).returncode == 0
    feed.close()
    offline = run_hotfix("catalog", "update")
    assert offline.returncode == 10 and "cannot fetch" in offline.stderr
    assert "team-fix" in run_hotfix("list").stdout
    before = tree_bytes(cache(_isolated_state))
    time.sleep(max(0.0, expires_at + 0.5 - time.time()))
    listed = run_hotfix("list")
    assert listed.returncode == 0 and "team-fix" not in listed.stdout
    assert "subscribed catalog team is stale" in listed.stderr
    status = run_hotfix("status")
    assert "subscribed catalog team is stale" in status.stderr
    assert "STALE" in run_hotfix("catalog", "list").stdout
    assert json.loads(run_hotfix("catalog", "list", "--json").stdout)[0]["stale"] is True
    assert tree_bytes(cache(_isolated_state)) == before


@pytest.mark.slow
def test_a_withheld_update_past_expiry_is_a_freeze(run_hotfix, tmp_path, keys, feed, tls, _isolated_state):
    publish(run_hotfix, tmp_path, keys, tmp_path / "out", "--expires", "3s")
    serve(tmp_path / "out", tmp_path / "www")
    assert add(run_hotfix, feed, tmp_path, tls).returncode == 0
    before = tree_bytes(cache(_isolated_state))
    time.sleep(3.5)
    frozen = run_hotfix("catalog", "update", "team")
    assert frozen.returncode == 15 and "EXPIRED: catalog team" in frozen.stderr
    assert tree_bytes(cache(_isolated_state)) == before


def test_file_urls_remove_and_usage_errors(run_hotfix, tmp_path, keys, feed, _isolated_state):
    publish(run_hotfix, tmp_path, keys, tmp_path / "out")
    url = (tmp_path / "out").as_uri()
    added = run_hotfix("catalog", "add", "local", url, "--trust", tmp_path / "trust.toml", "--json")
    assert added.returncode == 0 and json.loads(added.stdout)["release"]["version"] == 1
    twice = run_hotfix("catalog", "add", "local", url, "--trust", tmp_path / "trust.toml")
    assert twice.returncode == 3
    plain = run_hotfix("catalog", "add", "web", "http://example.com/c/", "--trust", tmp_path / "trust.toml")
    assert plain.returncode == 2 and "https://" in plain.stderr
    bad_name = run_hotfix("catalog", "add", "../x", url, "--trust", tmp_path / "trust.toml")
    assert bad_name.returncode == 2
    gone = run_hotfix("catalog", "add", "none", (tmp_path / "nothing").as_uri(), "--trust", tmp_path / "trust.toml")
    assert gone.returncode == 10 and not (_isolated_state / "feeds" / "none").exists()
    assert run_hotfix("catalog", "remove", "local").returncode == 0
    assert "team-fix" not in run_hotfix("list").stdout
    assert run_hotfix("catalog", "update").returncode == 2
    (tmp_path / "a-file").write_text("")
    unwritable = run_hotfix("catalog", "add", "local", url, "--trust", tmp_path / "trust.toml",
                            env={"HOTFIX_STATE_DIR": str(tmp_path / "a-file" / "state")})
    assert unwritable.returncode == 6 and "nothing was changed" in unwritable.stderr


@pytest.mark.slow
def test_a_second_update_waits_for_the_first(run_hotfix, tmp_path, keys, feed, tls, _isolated_state):
    """feeds/.NAME.lock: an update waits while another process holds the subscription's lock, then runs."""
    import fcntl
    import subprocess
    import sys

    publish(run_hotfix, tmp_path, keys, tmp_path / "out")
    serve(tmp_path / "out", tmp_path / "www")
    assert add(run_hotfix, feed, tmp_path, tls).returncode == 0
    publish(run_hotfix, tmp_path, keys, tmp_path / "out")
    serve(tmp_path / "out", tmp_path / "www")
    with open(_isolated_state / "feeds" / ".team.lock", "r+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        waiting = subprocess.Popen([sys.executable, "-m", "vllm_hotfix", "catalog", "update", "team"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(2)
        assert waiting.poll() is None  # still waiting for the lock
        assert json.loads((cache(_isolated_state) / "release.json").read_text())["version"] == 1
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0 and "to release 2" in out, err


@pytest.mark.tools
@pytest.mark.slow  # scrypt, minisign's defaults (1 GiB), twice
def test_minisign_itself_verifies_a_release_made_with_its_own_keys(run_hotfix, tmp_path, feed):
    """A key `minisign -G` made (encrypted), the release signed by `catalog publish`, checked by `minisign -V`."""
    import subprocess

    if shutil.which("minisign") is None:
        pytest.skip("minisign is not installed (apt-get install -y minisign)")
    pub, key = tmp_path / "team.pub", tmp_path / "team.key"
    made = subprocess.run(["minisign", "-G", "-f", "-p", pub, "-s", key], input="pw\npw\n", capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    done = run_hotfix("catalog", "publish", tmp_path / "catalog", "--to", tmp_path / "out", "--key", key,
                      env={"HOTFIX_KEY_PASSWORD": "pw"})
    assert done.returncode == 0, done.stderr
    assert [p.name for p in (tmp_path / "out").glob("*.minisig")] == ["release.json.minisig"]
    checked = subprocess.run(["minisign", "-V", "-m", tmp_path / "out" / "release.json", "-p", pub],  # as docs/feed.md pastes it
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and "version:1\texpires:" in checked.stdout, checked.stdout + checked.stderr
