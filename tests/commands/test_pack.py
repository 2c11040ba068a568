"""`hotfix pack`: an export becomes an OCI image layout that the real tools read -- `skopeo inspect` reads
it, `umoci unpack` gives files whose sha256 are the lock's -- byte for byte the same for the same
export; bad exports (a file that is not the lock's, a symlink, a FIFO) and foreign directories are
refused with nothing written; the printed skopeo line runs as pasted."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from fixtures.kube import SITE, make_export
from fixtures.tools import tool
from vllm_hotfix.containers import bundle, oci, oci_layer
from vllm_hotfix_guard.txn.hotfix_lock import load_lock
from vllm_hotfix_guard.txn.lock_check import expected_fingerprint


def pack(run_hotfix, export: Path, out: Path, *args):
    done = run_hotfix("pack", "--export-dir", export, "--to", out, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def tree(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def lock_sha256s(export: Path) -> dict[str, str]:
    return {f.path: f.sha256 for f in load_lock(export / "hotfix.lock").mounted_files()}


def test_two_packs_of_one_export_are_one_image_byte_for_byte(tmp_path, run_hotfix):
    export = make_export(tmp_path / "export")
    first = pack(run_hotfix, export, tmp_path / "one")
    second = pack(run_hotfix, export, tmp_path / "two")
    again = pack(run_hotfix, export, tmp_path / "one")  # packed again into its own directory: replaced whole
    assert first["digest"] == second["digest"] == again["digest"]
    assert tree(tmp_path / "one") == tree(tmp_path / "two")
    dry = pack(run_hotfix, export, tmp_path / "dry", "--dry-run")
    assert dry["digest"] == first["digest"] and not (tmp_path / "dry").exists()
    lock = load_lock(export / "hotfix.lock")
    assert first["fingerprint"] == expected_fingerprint(lock) == first["tag"]
    assert first["media_type"] == oci.MEDIA_INDEX and [p["platform"] for p in first["platforms"]] == list(oci.PLATFORMS)
    assert first["annotations"][bundle.HOTFIXES] == "fix-vllm@1 fix-vllm_ascend@1"
    assert first["annotations"][bundle.BASELINE] == "vllm==0.30.0 vllm-ascend==0.30.0"
    assert first["annotations"][bundle.LOCK_SHA256] == hashlib.sha256((export / "hotfix.lock").read_bytes()).hexdigest()
    assert first["layer"]["files"] == 3 and first["reference"] is None
    site = export / "guard" / "site-packages"  # the guard's tree goes in too, listed
    assert first["guard"] == sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file())
    assert any(g.endswith(".dist-info/RECORD") for g in first["guard"])
    # another platform set is another image of the same layer
    single = pack(run_hotfix, export, tmp_path / "amd64", "--platform", "linux/amd64")
    assert single["layer"]["digest"] == first["layer"]["digest"] and single["digest"] != first["digest"]
    assert single["media_type"] == oci.MEDIA_MANIFEST and single["digest"] == first["platforms"][0]["manifest"]
    assert {(p / "blobs").stat().st_mode & 0o777 for p in (tmp_path / "one", tmp_path / "two")} == {0o755}
    assert {p.stat().st_mode & 0o777 for p in (tmp_path / "one").rglob("*") if p.is_file()} == {0o644}


@pytest.mark.tools
def test_skopeo_inspect_reads_the_layout_for_each_platform(tmp_path, run_hotfix):
    skopeo = tool("skopeo", "skopeo (Debian)")
    export = make_export(tmp_path / "export")
    packed = pack(run_hotfix, export, tmp_path / "bundle")

    def inspect(*args):
        done = subprocess.run([skopeo, "inspect", *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    seen = inspect(f"oci:{tmp_path / 'bundle'}")
    assert seen["Digest"] == packed["digest"] and seen["Os"] == "linux"
    assert seen["Labels"][bundle.FINGERPRINT] == packed["fingerprint"]
    assert seen["Layers"] == [packed["layer"]["digest"]]
    arm = inspect("--override-arch", "arm64", f"oci:{tmp_path / 'bundle'}:{packed['tag']}")
    assert arm["Architecture"] == "arm64" and arm["Layers"] == seen["Layers"]
    raw = inspect("--raw", f"oci:{tmp_path / 'bundle'}")
    assert raw["mediaType"] == oci.MEDIA_INDEX and raw["annotations"][bundle.FORMAT] == bundle.FORMAT_VERSION


@pytest.mark.tools
def test_umoci_unpacks_the_lock_s_files(tmp_path, run_hotfix):
    umoci, skopeo = tool("umoci", "umoci (Debian)"), tool("skopeo", "skopeo (Debian)")
    export = make_export(tmp_path / "export", {"vllm/v1/worker/gpu/model_states/mamba_hybrid.py": 400,
                                               "vllm/config/cache.py": 300, "vllm_ascend/ops/fused_moe.py": 200,
                                               "vllm/model_executor/layers/fused_moe/configs/"
                                               "E=128,N=384,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,"
                                               "block_shape=[128,128].json": 150})
    single = pack(run_hotfix, export, tmp_path / "amd64", "--platform", "linux/amd64")
    both = pack(run_hotfix, export, tmp_path / "bundle")
    # umoci takes one manifest: the single-platform layout, and the arm64 image skopeo copies out of the index
    policy = tmp_path / "policy.json"  # skopeo copy asks a signature policy; this one accepts the local layout
    policy.write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}]}))
    copied = subprocess.run([skopeo, "copy", "--policy", str(policy), "--override-arch", "arm64",
                             f"oci:{tmp_path / 'bundle'}:{both['tag']}", f"oci:{tmp_path / 'arm64'}:{both['tag']}"],
                            capture_output=True, text=True, timeout=60)
    assert copied.returncode == 0, copied.stderr
    for layout, tag in ((tmp_path / "amd64", single["tag"]), (tmp_path / "arm64", both["tag"])):
        unpacked = tmp_path / f"unpacked-{layout.name}"
        done = subprocess.run([umoci, "unpack", "--rootless", "--image", f"{layout}:{tag}", str(unpacked)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        rootfs = unpacked / "rootfs"
        found = {p.relative_to(rootfs / "site-packages").as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                 for p in (rootfs / "site-packages").rglob("*") if p.is_file()}
        assert found == lock_sha256s(export)
        assert (rootfs / "hotfix.lock").read_bytes() == (export / "hotfix.lock").read_bytes()
        assert sorted(p.name for p in rootfs.iterdir()) == ["guard", "hotfix.lock", "site-packages"]
        site = export / "guard" / "site-packages"  # the guard's distribution, byte for byte as exported
        guard = {p.relative_to(site).as_posix(): p.read_bytes() for p in site.rglob("*") if p.is_file()}
        assert guard and {p.relative_to(rootfs / "guard").as_posix(): p.read_bytes()
                          for p in (rootfs / "guard").rglob("*") if p.is_file()} == guard
        assert all(p.stat().st_mtime == 0 for p in rootfs.rglob("*"))


def test_the_layer_is_reproducible_tar_and_gzip(tmp_path):
    """Members sorted with their parents, mtime 0, uid/gid 0 without names, 0644 / 0755, a pax header
    only for a name too long for ustar (and only its path), gzip with no name and mtime 0."""
    import gzip
    import io
    import tarfile

    long = "site-packages/vllm/" + "x" * 120 + ".py"
    entries = [oci.Entry(path="site-packages/vllm/b.py", data=b"b"), oci.Entry(path="hotfix.lock", data=b"{}"),
               oci.Entry(path=long, data=b"long"), oci.Entry(path="site-packages/vllm/a/c.py", data=b"c")]
    layout = oci.build(entries, platforms=(oci.Platform.parse("linux/amd64"),), ref_name="t", labels={}, annotations={},
                       created_by="test")
    compressed = layout.files[f"{oci.BLOBS}/{layout.layer.hex}"]
    assert compressed[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no FNAME, mtime 0, OS unknown
    data = gzip.decompress(compressed)
    assert oci.digest_of(data) == layout.diff_id
    members = list(tarfile.open(fileobj=io.BytesIO(data)))
    assert [m.name for m in members] == ["hotfix.lock", "site-packages", "site-packages/vllm", "site-packages/vllm/a",
                                         "site-packages/vllm/a/c.py", "site-packages/vllm/b.py", long]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    assert {m.name: m.mode for m in members if m.isdir()} == dict.fromkeys(["site-packages", "site-packages/vllm",
                                                                            "site-packages/vllm/a"], 0o755)
    assert {m.mode for m in members if m.isfile()} == {0o644}
    assert [m.pax_headers for m in members if m.pax_headers] == [{"path": long}]
    assert oci.build(list(reversed(entries)), platforms=(oci.Platform.parse("linux/amd64"),), ref_name="t", labels={},
                     annotations={}, created_by="test").files == layout.files
    with pytest.raises(Exception, match="given twice"):
        oci.tar_layer(entries + [oci.Entry(path="hotfix.lock", data=b"")])


@pytest.mark.parametrize("edited, words", [
    ("files/vllm/config/cache.py", "does not hold the bytes"),
    # the guard's tree is checked against its RECORD (txn/exported.read_guard) before it goes into the layer
    ("guard/site-packages/vllm_hotfix_guard/__init__.py", "does not hold the bytes its RECORD names"),
])
def test_a_file_that_is_not_the_lock_s_never_goes_into_a_bundle(tmp_path, run_hotfix, edited, words):
    export = make_export(tmp_path / "export")
    victim = export / edited
    victim.write_bytes(victim.read_bytes() + b"# edited after the export\n")
    done = run_hotfix("pack", "--export-dir", export, "--to", tmp_path / "bundle")
    assert done.returncode == 8 and words in done.stderr, done.stderr
    assert not (tmp_path / "bundle").exists() and sorted(os.listdir(tmp_path)) == ["export"]


@pytest.mark.parametrize("how", ["symlinked file", "symlinked directory", "fifo", "missing"])
def test_links_devices_and_holes_in_the_export_are_refused(tmp_path, run_hotfix, how):
    export = make_export(tmp_path / "export")
    target = export / "files" / "vllm" / "config" / "cache.py"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if how == "symlinked file":
        (elsewhere / "cache.py").write_bytes(target.read_bytes())  # even the right bytes, through a link
        target.unlink()
        target.symlink_to(elsewhere / "cache.py")
    elif how == "symlinked directory":
        os.rename(target.parent, elsewhere / "config")
        target.parent.symlink_to(elsewhere / "config")
    elif how == "fifo":
        target.unlink()
        os.mkfifo(target)
    else:
        target.unlink()
    done = run_hotfix("pack", "--export-dir", export, "--to", tmp_path / "bundle")
    assert done.returncode == 8 and "Traceback" not in done.stderr, done.stderr
    assert {"symlinked file": "symbolic link", "symlinked directory": "symbolic link", "fifo": "not a regular file",
            "missing": "not readable"}[how] in done.stderr
    assert not (tmp_path / "bundle").exists()


def test_a_foreign_directory_is_never_replaced(tmp_path, run_hotfix):
    export = make_export(tmp_path / "export")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me\n")
    done = run_hotfix("pack", "--export-dir", export, "--to", mine)
    assert done.returncode == 3 and "not a bundle written by `hotfix pack`" in done.stderr
    assert tree(mine) == {"notes.txt": b"keep me\n"}
    other = tmp_path / "other-layout"  # an OCI layout of someone else's (an image skopeo copied here)
    pack(run_hotfix, export, other)
    index = json.loads((other / "index.json").read_text())
    index["manifests"][0]["annotations"] = {oci.REF_NAME: "latest"}
    (other / "index.json").write_text(json.dumps(index))
    before = tree(other)
    assert run_hotfix("pack", "--export-dir", export, "--to", other).returncode == 3 and tree(other) == before


def test_usage_errors_are_one_line_exit_2(tmp_path, run_hotfix):
    export = make_export(tmp_path / "export")
    for args, words in ((("--tag", "-bad"), "not an image tag"), (("--platform", "amd64"), "not a platform"),
                        (("--repository", "registry.example/x:v1"), "not an image repository"),
                        (("--to", tmp_path / "a:b"), "holds ':'")):
        done = run_hotfix("pack", "--export-dir", export, "--to", tmp_path / "bundle", *args)
        assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    done = run_hotfix("pack", "mamba-align-block-size", "--export-dir", export, "--to", tmp_path / "bundle")
    assert done.returncode == 2 and "not both" in done.stderr
    assert not (tmp_path / "bundle").exists()


def test_a_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    from vllm_hotfix.commands import pack as command
    from vllm_hotfix_guard.errors import WriteFailed
    from vllm_hotfix.txn import staged

    export = make_export(tmp_path / "export")
    out = tmp_path / "bundle"
    command.run(export_dir=export, out_dir=out)
    before = tree(out)
    calls = []

    def failing(path, data, mode, **kw):
        calls.append(path)
        if len(calls) == 3:
            raise OSError(28, "No space left on device", str(path))
        return real(path, data, mode, **kw)

    real = staged.write_new_file
    monkeypatch.setattr(staged, "write_new_file", failing)
    with pytest.raises(WriteFailed, match="No space left on device"):
        command.run(export_dir=export, out_dir=out, tag="other")
    assert tree(out) == before and sorted(os.listdir(tmp_path)) == ["bundle", "export"]


def test_the_printed_push_line_runs_as_pasted(tmp_path, run_hotfix):
    """The skopeo line, pasted into sh, hands skopeo exactly the layout and the destination (a stand-in
    skopeo records its arguments); without REPOSITORY the shell stops with a message."""
    export = make_export(tmp_path / "export with space")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "skopeo").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    (bin_dir / "skopeo").chmod(0o755)
    out = tmp_path / "my bundle"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    for repository in ("registry.example/team/vllm-hotfix", None):
        extra = ("--repository", repository) if repository else ()
        done = run_hotfix("pack", "--export-dir", export, "--to", out, *extra)
        assert done.returncode == 0, done.stderr
        line = next(x.strip().removeprefix("next: ") for x in done.stdout.splitlines() if "skopeo copy" in x)
        tag = load_tag(out)
        ran = subprocess.run(["sh", "-c", line], capture_output=True, text=True,
                             env={**os.environ, **env, "REPOSITORY": "registry.example/other"})
        destination = f"docker://{repository or 'registry.example/other'}:{tag}"
        assert ran.stdout.splitlines() == ["copy", "--multi-arch=all", "--preserve-digests", f"oci:{out}:{tag}", destination]
        if repository is None:
            unset = subprocess.run(["sh", "-c", line], capture_output=True, text=True,
                                   env={k: v for k, v in {**os.environ, **env}.items() if k != "REPOSITORY"})
            assert unset.returncode != 0 and "set REPOSITORY=" in unset.stderr and not unset.stdout
        digest = json.loads((out / "index.json").read_text())["manifests"][0]["digest"]
        assert f"{repository or '$REPOSITORY'}@{digest}" in done.stdout


def load_tag(layout: Path) -> str:
    return json.loads((layout / "index.json").read_text())["manifests"][0]["annotations"][oci.REF_NAME]


@pytest.mark.real
@pytest.mark.slow
def test_pack_of_a_real_export_is_what_the_guard_fingerprints(tmp_path, vllm_install, run_hotfix):
    """On a real vLLM 0.30.0 install: `hotfix pack ID --python` (exported on the fly) is the very image
    of `hotfix export` + `hotfix pack --export-dir`, and its fingerprint is what `hotfix verify --lock`
    prints once the hotfix is in effect."""
    venv = vllm_install("0.30.0")
    hotfix = "mamba-align-block-size"
    export = tmp_path / "export"
    assert run_hotfix("export", hotfix, "--to", export, "--python", venv.python).returncode == 0
    from_dir = pack(run_hotfix, export, tmp_path / "from-dir")
    done = run_hotfix("pack", hotfix, "--python", venv.python, "--to", tmp_path / "from-ids", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["digest"] == from_dir["digest"]
    assert tree(tmp_path / "from-ids") == tree(tmp_path / "from-dir")
    applied = run_hotfix("apply", hotfix, "--python", venv.python)
    assert applied.returncode == 0, applied.stderr
    verified = run_hotfix("verify", "--lock", export / "hotfix.lock", "--python", venv.python, "--json")
    assert verified.returncode == 0, verified.stderr
    assert {h["fingerprint"] for h in json.loads(verified.stdout)} == {from_dir["fingerprint"]}
    assert load_lock(export / "hotfix.lock").site_packages == str(venv.site_packages) != SITE


def test_a_signal_while_writing_leaves_nothing_behind(tmp_path, monkeypatch):
    import signal

    from vllm_hotfix.commands import pack as command
    from vllm_hotfix_guard.errors import HotfixError
    from vllm_hotfix.txn import staged

    export = make_export(tmp_path / "export")
    out = tmp_path / "bundle"
    command.run(export_dir=export, out_dir=out)
    before = tree(out)
    real, calls = staged.write_new_file, []

    def interrupted(path, data, mode, **kw):
        calls.append(path)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(path, data, mode, **kw)

    monkeypatch.setattr(staged, "write_new_file", interrupted)
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(HotfixError, match="interrupted by SIGTERM") as caught:
        command.run(export_dir=export, out_dir=out, tag="other")
    assert caught.value.exit_code == 143
    assert tree(out) == before and sorted(os.listdir(tmp_path)) == ["bundle", "export"]
    assert signal.getsignal(signal.SIGTERM) == previous  # the handler is put back


def test_a_bundle_read_back_is_its_content_with_room_for_signatures_and_the_guard(tmp_path):
    """bundle.check on a layout's own layer gives back the content packed, extra members included where a
    bundle may carry them (the lock's signature files, guard/); any other member is refused."""
    from vllm_hotfix_guard.errors import InvalidInput
    from vllm_hotfix_guard.txn.hotfix_lock import read_lock

    export = make_export(tmp_path / "export")
    lock_bytes, lock = read_lock(export / "hotfix.lock")
    files = {f.export: (export / f.export).read_bytes() for f in lock.mounted_files()}

    def round_trip(extra):
        content = bundle.content(lock, lock_bytes, files, source="test", extra=extra)
        notes = bundle.annotations(content)
        layout = oci.build(bundle.entries(content), platforms=(oci.Platform.parse("linux/arm64"),), ref_name="t",
                           labels=notes, annotations=notes, created_by="test")
        blob = oci.blob_reader("test", lambda name, cap: layout.files[name])
        members = oci_layer.layer_members("test", blob, layout.layer, layout.diff_id, cap=1 << 20, content_cap=1 << 20)
        return bundle.check(members, source="test", annotated=notes)

    from vllm_hotfix.txn.exported import read_guard

    guard = bundle.guard_entries(read_guard(export, lock))
    extra = (oci.Entry(path="hotfix.lock.ABCDEF0123456789.minisig", data=b"untrusted comment: x\n"), *guard)
    back = round_trip(extra)
    assert back.files == {f.path: files[f.export] for f in lock.mounted_files()} and back.lock_bytes == lock_bytes
    assert {e.path for e in back.extra} == {e.path for e in extra} and back.fingerprint == expected_fingerprint(lock)
    with pytest.raises(InvalidInput, match="which a hotfix bundle does not"):
        round_trip((oci.Entry(path="etc/passwd", data=b"x"),))
    # issue 43: the guard is the one the lock names, file for file (a signature of the lock covers it)
    changed = tuple(oci.Entry(path=e.path, data=e.data + b"\nimport os\n") if e.path.endswith("/plugin.py") else e
                    for e in guard)
    with pytest.raises(InvalidInput, match="plugin.py differs from the guard file the lock names"):
        round_trip(changed)
    with pytest.raises(InvalidInput, match="sitecustomize.py is not a guard file the lock names"):
        round_trip((*guard, oci.Entry(path="guard/sitecustomize.py", data=b"import os\n")))
    with pytest.raises(InvalidInput, match="__init__.py, a guard file the lock names, is missing"):
        round_trip(tuple(e for e in guard if not e.path.endswith("vllm_hotfix_guard/__init__.py")))
