"""`hotfix k8s --bundle REF@sha256:...`: the overlay mounts a packed bundle as an image volume pinned by
digest (one read-only subPath mount per file, the lock and its signature files), rendered by the real
`kubectl kustomize` and accepted by kubernetes-validate; a tag or a bad digest is refused, a
--bundle-dir is read as untrusted input and must be the REF's digest. `hotfix pack` carries the lock's
signature files; `hotfix k8s --admission --trust POLICY` approves only locks that policy accepts (real
minisign keys and signatures, the exit codes of `verify --lock`), and the policy's CEL, run by the real
CEL implementations of tests/fixtures/cel.py, admits the pod the bundle overlay's template makes and
refuses its unapproved variants."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fixtures.cel import ENGINES, judge
from fixtures.kube import DEPLOYMENT, LWS, SITE, make_export, render, validate
from fixtures.tools import tool
from vllm_hotfix.containers import bundle, k8s_image_volume, oci
from vllm_hotfix_guard.settings import FINGERPRINT_ANNOTATION
from vllm_hotfix_guard.txn.hotfix_lock import load_lock
from vllm_hotfix_guard.txn.lock_check import expected_fingerprint

pytestmark = pytest.mark.tools

REPOSITORY = "registry.example/team/vllm-hotfix"
LOCK = "/etc/vllm-hotfix/hotfix.lock"
VLLM = "vllm/vllm-openai@sha256:" + "1" * 64
needs_minisign = pytest.mark.skipif(shutil.which("minisign") is None and not os.environ.get("CI"),
                                    reason="minisign is not installed (apt-get install -y minisign)")


def pack(run_hotfix, export: Path, out: Path, *args) -> dict:
    done = run_hotfix("pack", "--export-dir", export, "--to", out, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def overlay(run_hotfix, tmp_path: Path, reference: str, *args, manifest: str = DEPLOYMENT, workload="deployment/vllm",
            containers=("vllm",)):
    base = tmp_path / "vllm.yaml"
    base.write_text(manifest)
    out = tmp_path / "overlay"
    named = [a for c in containers for a in ("--container", c)]
    return run_hotfix("k8s", "--bundle", reference, *args, "--base", base, "--workload", workload, *named,
                      "--to", out), out


def by_kind(objects, kind):
    return next(o for o in objects if o["kind"] == kind)


@pytest.fixture
def packed(tmp_path, run_hotfix):
    export = make_export(tmp_path / "export")
    (export / "hotfix.lock.minisig").write_bytes(b"untrusted comment: not checked by pack\n")
    made = pack(run_hotfix, export, tmp_path / "bundle")
    return {"export": export, "bundle": tmp_path / "bundle", "made": made, "ref": f"{REPOSITORY}@{made['digest']}"}


def test_the_overlay_mounts_every_file_from_the_image_volume_by_digest(tmp_path, run_hotfix, packed):
    done, out = overlay(run_hotfix, tmp_path, packed["ref"], "--bundle-dir", packed["bundle"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("note: an image volume needs Kubernetes >= 1.33") and "hotfix bake" in done.stdout
    objects = render(out)
    validate(objects)  # kubernetes-validate, 1.31 and 1.35 schemas, strict
    assert [o["kind"] for o in objects] == ["Deployment"]  # no ConfigMap
    pod = by_kind(objects, "Deployment")["spec"]["template"]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == k8s_image_volume.VOLUME)
    assert volume == {"name": k8s_image_volume.VOLUME, "image": {"reference": packed["ref"], "pullPolicy": "IfNotPresent"}}
    (container,) = pod["spec"]["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"] if m["name"] == k8s_image_volume.VOLUME}
    lock = load_lock(packed["export"] / "hotfix.lock")
    wanted = {f"{SITE}/{f.path}": f"site-packages/{f.path}" for f in lock.mounted_files()}
    wanted |= {LOCK: "hotfix.lock", LOCK + ".minisig": "hotfix.lock.minisig"}
    guard = guard_tree(packed["export"])  # the guard's distribution, mounted file by file into site-packages
    assert guard and packed["made"]["guard"] == sorted(guard)
    wanted |= {f"{SITE}/{rel}": f"{bundle.GUARD_DIR}/{rel}" for rel in guard}
    assert {p: m["subPath"] for p, m in mounts.items()} == wanted
    assert all(m["readOnly"] is True for m in mounts.values())
    assert {"name": "shm", "mountPath": "/dev/shm"} in container["volumeMounts"]  # the workload's own kept
    variables = {e["name"]: e for e in container["env"]}
    assert variables["HOTFIX_LOCK"]["value"] == LOCK
    # `ready` checks the mounted lock against the pod's own annotation, read by the downward API
    assert variables["HOTFIX_EXPECT_FINGERPRINT"] == {"name": "HOTFIX_EXPECT_FINGERPRINT", "valueFrom": {
        "fieldRef": {"fieldPath": f"metadata.annotations['{FINGERPRINT_ANNOTATION}']"}}}
    assert pod["metadata"]["annotations"][FINGERPRINT_ANNOTATION] == expected_fingerprint(lock)
    # each subPath is a member of the layer pack wrote
    members = {path: data for path, data, _ in _members(packed["bundle"]) if data is not None}
    assert set(wanted.values()) <= set(members)
    assert all(members[f"{bundle.GUARD_DIR}/{rel}"] == data for rel, data in guard.items())
    # from the export, without the layout: the same overlay
    (tmp_path / "again").mkdir()
    again, out2 = overlay(run_hotfix, tmp_path / "again", packed["ref"], "--export-dir", packed["export"], "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["bundle"]["signatures"] == ["hotfix.lock.minisig"]
    assert (out2 / "hotfix-patch.yaml").read_bytes() == (out / "hotfix-patch.yaml").read_bytes()


def guard_tree(export: Path) -> dict[str, bytes]:
    site = export / "guard" / "site-packages"
    return {p.relative_to(site).as_posix(): p.read_bytes() for p in sorted(site.rglob("*")) if p.is_file()}


def test_a_bundle_without_the_guard_is_refused_unless_no_guard_says_the_image_has_it(tmp_path, run_hotfix, packed):
    """Item 2 of issue 43, as the admission route: a bundle packed --no-guard is refused (exit 3, one line and its
    hint, nothing written) with or without strict mode; --no-guard accepts it only with --no-strict (strict mode
    would stop nothing); --no-guard with a bundle that carries the guard is a usage error (exit 2)."""
    export = make_export(tmp_path / "bare-export", guard=False)
    made = pack(run_hotfix, export, tmp_path / "bare-bundle")
    assert made["guard"] == []
    ref, where = f"{REPOSITORY}@{made['digest']}", ("--bundle-dir", tmp_path / "bare-bundle")
    for args in ((), ("--no-strict",)):
        done, out = overlay(run_hotfix, tmp_path, ref, *where, *args)
        assert done.returncode == 3 and "carries no guard" in done.stderr and not out.exists(), done.stderr
        assert len(done.stderr.strip().splitlines()) == 2 and "--no-guard --no-strict" in done.stderr
        assert "hotfix pack" in done.stderr
    done, out = overlay(run_hotfix, tmp_path, ref, *where, "--no-guard")
    assert done.returncode == 3 and "strict mode would stop nothing" in done.stderr and not out.exists()
    done, out = overlay(run_hotfix, tmp_path, ref, *where, "--no-guard", "--no-strict")
    assert done.returncode == 0, done.stderr
    pod = by_kind(render(out), "Deployment")["spec"]["template"]
    assert {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}["HOTFIX_STRICT"] == "0"
    assert not any("vllm_hotfix_guard" in m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"])
    shutil.rmtree(out)
    done, out = overlay(run_hotfix, tmp_path, packed["ref"], "--bundle-dir", packed["bundle"], "--no-guard", "--no-strict")
    assert done.returncode == 2 and "--no-guard" in done.stderr and "carries the guard" in done.stderr, done.stderr
    assert not out.exists()


def _members(layout: Path):
    from vllm_hotfix.containers.bundle_read import read_bundle

    _, content = read_bundle(layout)
    yield (bundle.LOCK_PATH, content.lock_bytes, 0o644)
    yield from ((f"{bundle.FILES_DIR}/{p}", d, 0o644) for p, d in content.files.items())
    yield from ((e.path, e.data, e.mode) for e in content.extra)


def test_a_leaderworkerset_mounts_the_bundle_in_both_templates(tmp_path, run_hotfix, packed):
    done, out = overlay(run_hotfix, tmp_path, packed["ref"], "--bundle-dir", packed["bundle"], manifest=LWS,
                        workload="leaderworkerset/vllm", containers=("vllm-leader", "vllm-worker"))
    assert done.returncode == 0, done.stderr
    objects = render(out)
    validate(objects)
    lws = by_kind(objects, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    for template in ("leaderTemplate", "workerTemplate"):
        volumes = [v for v in lws[template]["spec"]["volumes"] if "image" in v]
        assert [v["image"]["reference"] for v in volumes] == [packed["ref"]]


@pytest.mark.parametrize("reference, words", [
    (f"{REPOSITORY}:hf1-0123456789abcdef", "not pinned by digest"),
    (f"{REPOSITORY}@sha256:abc", "64 lowercase hex"),
    (f"{REPOSITORY}@sha512:" + "a" * 64, "64 lowercase hex"),
    (f"{REPOSITORY}@sha256:" + "A" * 64, "64 lowercase hex"),
    (f"{REPOSITORY}:v1@sha256:" + "a" * 64, "a tag beside the digest"),
    ("@sha256:" + "a" * 64, "not an image repository"),
])
def test_a_tag_or_a_bad_digest_is_refused_in_one_line(tmp_path, run_hotfix, reference, words):
    export = make_export(tmp_path / "export")
    done, out = overlay(run_hotfix, tmp_path, reference, "--export-dir", export)
    assert done.returncode == 2 and words in done.stderr, done.stderr
    assert done.stderr.count("hotfix: error:") == 1 and "Traceback" not in done.stderr
    assert not out.exists()


def test_the_bundle_dir_must_be_the_reference_s_digest_and_is_read_as_untrusted_input(tmp_path, run_hotfix, packed):
    other = f"{REPOSITORY}@sha256:" + "9" * 64
    done, out = overlay(run_hotfix, tmp_path, other, "--bundle-dir", packed["bundle"])
    assert done.returncode == 3 and packed["made"]["digest"] in done.stderr and not out.exists(), done.stderr
    platform = packed["made"]["platforms"][1]["manifest"]  # a platform's manifest is the bundle too
    assert overlay(run_hotfix, tmp_path, f"{REPOSITORY}@{platform}", "--bundle-dir", packed["bundle"])[0].returncode == 0
    without = run_hotfix("k8s", "--bundle-dir", packed["bundle"], "--base", tmp_path / "vllm.yaml", "--workload",
                         "deployment/vllm", "--container", "vllm", "--to", tmp_path / "o2")
    assert without.returncode == 2 and "--bundle-dir needs --bundle" in without.stderr
    # a blob replaced by a link (to the very same bytes) is refused; so is a linked blobs/ directory
    forged = tmp_path / "forged"
    shutil.copytree(packed["bundle"], forged)
    blob = forged / oci.BLOBS / packed["made"]["layer"]["digest"].partition(":")[2]
    (tmp_path / "elsewhere").write_bytes(blob.read_bytes())
    blob.unlink()
    blob.symlink_to(tmp_path / "elsewhere")
    shutil.rmtree(tmp_path / "overlay")
    linked, out = overlay(run_hotfix, tmp_path, packed["ref"], "--bundle-dir", forged)
    assert linked.returncode == 8 and "Traceback" not in linked.stderr and not out.exists(), linked.stderr
    moved = tmp_path / "moved"
    shutil.copytree(packed["bundle"], moved)
    shutil.move(moved / "blobs", tmp_path / "real-blobs")
    (moved / "blobs").symlink_to(tmp_path / "real-blobs")
    refused, _ = overlay(run_hotfix, tmp_path, packed["ref"], "--bundle-dir", moved)
    assert refused.returncode == 8 and "blobs is not a directory" in refused.stderr, refused.stderr


def test_past_one_configmap_the_overlay_says_bundle_and_bake(tmp_path, run_hotfix):
    export = make_export(tmp_path / "export", {"vllm/a.py": 700_000, "vllm/b.py": 700_000})
    base = tmp_path / "vllm.yaml"
    base.write_text(DEPLOYMENT)
    done = run_hotfix("k8s", "--export-dir", export, "--base", base, "--workload", "deployment/vllm", "--container",
                      "vllm", "--to", tmp_path / "overlay")
    assert done.returncode == 0, done.stderr
    assert "past the 1,048,576 one ConfigMap holds" in done.stderr and "--bundle REF@sha256:" in done.stderr
    refused = run_hotfix("k8s", "--export-dir", export, "--base", base, "--workload", "deployment/vllm", "--container",
                         "vllm", "--max-configmaps", "1", "--to", tmp_path / "refused")
    assert refused.returncode == 3 and "--bundle REF@sha256:" in refused.stderr and "hotfix bake" in refused.stderr


# -- admission from signed locks ------------------------------------------------------------------------


class Key:
    """A minisign key pair made by the real `minisign -G` (no password)."""

    def __init__(self, directory: Path, name: str):
        self.pub, self.key = directory / f"{name}.pub", directory / f"{name}.key"
        done = subprocess.run(["minisign", "-G", "-f", "-W", "-p", self.pub, "-s", self.key], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        self.line = self.pub.read_text().splitlines()[1]


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    if shutil.which("minisign") is None:
        pytest.skip("minisign is not installed")
    directory = tmp_path_factory.mktemp("keys")
    return {name: Key(directory, name) for name in ("release", "sre")}


def write_policy(path: Path, keys, extra: str = "") -> Path:
    path.write_text("threshold = 2\n" + extra + "\n" + "".join(
        f'[[keys]]\nname = "{name}"\nminisign = "{key.line}"\n' for name, key in keys.items()))
    path.chmod(0o644)
    return path


def signed_export(run_hotfix, directory: Path, keys, signers=("release", "sre"), *, version=3,
                  expires="2099-01-01T00:00:00Z") -> Path:
    export = make_export(directory)
    data = json.loads((export / "hotfix.lock").read_text())
    data.update(version=version, expires=expires)
    (export / "hotfix.lock").write_text(json.dumps(data, indent=2) + "\n")
    for name in signers:
        done = run_hotfix("sign", export / "hotfix.lock", "--key", keys[name].key)
        assert done.returncode == 0, done.stderr
    return export


def admit(run_hotfix, tmp_path: Path, policy: Path, *approve, out="admission", extra=()):
    args = [a for source in approve for a in ("--approve", source)]
    return run_hotfix("k8s", "--admission", "--trust", policy, *args, "--namespace", "inference", "--to",
                      tmp_path / out, *extra)


@needs_minisign
def test_pack_carries_the_signatures_and_admission_approves_the_signed_bundle(tmp_path, run_hotfix, keys):
    export = signed_export(run_hotfix, tmp_path / "export", keys)
    made = pack(run_hotfix, export, tmp_path / "bundle")
    signatures = sorted(p.name for p in export.iterdir() if p.name.endswith(".minisig"))
    assert len(signatures) == 2 and made["signatures"] == signatures
    held = {path: data for path, data, _ in _members(tmp_path / "bundle")}
    assert all(held[name] == (export / name).read_bytes() for name in signatures)
    # the real unpacker gives them beside the lock, byte for byte
    umoci = tool("umoci", "umoci (Debian)")
    single = pack(run_hotfix, export, tmp_path / "amd64", "--platform", "linux/amd64")
    unpacked = tmp_path / "unpacked"
    done = subprocess.run([umoci, "unpack", "--rootless", "--image", f"{tmp_path / 'amd64'}:{single['tag']}",
                           str(unpacked)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (unpacked / "rootfs").iterdir()) == ["guard", "hotfix.lock", *signatures, "site-packages"]
    assert all((unpacked / "rootfs" / n).read_bytes() == (export / n).read_bytes() for n in ["hotfix.lock", *signatures])
    policy = write_policy(tmp_path / "trust.toml", keys)
    done = admit(run_hotfix, tmp_path, policy, tmp_path / "bundle", f"{VLLM}={export / 'hotfix.lock'}", extra=("--json",))
    assert done.returncode == 0, done.stderr
    approved = json.loads(done.stdout)
    assert {fp for a in approved["approved"] for fp in a["fingerprints"]} == {made["fingerprint"]}
    assert all("signed by release, sre (2 of threshold 2)" in s["source"] for s in approved["sources"])
    # the same bundle, its lock's signatures gone from the export it is packed from: unsigned, exit 11
    for name in signatures:
        (export / name).unlink()
    pack(run_hotfix, export, tmp_path / "unsigned")
    refused = admit(run_hotfix, tmp_path, policy, tmp_path / "unsigned", out="refused")
    assert refused.returncode == 11 and "UNSIGNED" in refused.stderr and not (tmp_path / "refused").exists()


@needs_minisign
@pytest.mark.parametrize("case, code, words", [
    ("unsigned", 11, "UNSIGNED"),
    ("one key", 12, "UNTRUSTED"),
    ("tampered", 13, "TAMPERED"),
    ("rollback", 14, "ROLLBACK"),
    ("expired", 15, "EXPIRED"),
])
def test_a_lock_the_policy_refuses_is_approved_for_nothing_with_verify_s_exit_code(tmp_path, run_hotfix, keys, case,
                                                                                   code, words):
    signers = {"unsigned": (), "one key": ("release",)}.get(case, ("release", "sre"))
    expires = "2020-01-01T00:00:00Z" if case == "expired" else "2099-01-01T00:00:00Z"
    export = signed_export(run_hotfix, tmp_path / "export", keys, signers, expires=expires)
    if case == "tampered":
        lock = export / "hotfix.lock"
        lock.write_text(lock.read_text().replace('"version": 3', '"version": 30'))
    policy = write_policy(tmp_path / "trust.toml", keys, "min_version = 5" if case == "rollback" else "")
    verified = run_hotfix("verify", "--lock", export / "hotfix.lock", "--trust", policy)
    assert verified.returncode == code  # the one verdict: verify --lock says the same
    done = admit(run_hotfix, tmp_path, policy, f"{VLLM}={export / 'hotfix.lock'}")
    assert done.returncode == code and words in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "admission").exists()


@pytest.fixture(params=ENGINES, ids=lambda e: e.name)
def engine(request):
    return request.param()


@needs_minisign
def test_the_pod_of_the_bundle_overlay_is_admitted_and_each_unapproved_variant_refused(tmp_path, run_hotfix, keys,
                                                                                        engine):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    export = signed_export(run_hotfix, tmp_path / "export", keys)
    made = pack(run_hotfix, export, tmp_path / "bundle")
    reference = f"{REPOSITORY}@{made['digest']}"
    done, out = overlay(run_hotfix, tmp_path, reference, "--bundle-dir", tmp_path / "bundle",
                        manifest=DEPLOYMENT.replace("vllm/vllm-openai:v0.30.0", VLLM))
    assert done.returncode == 0, done.stderr
    policy = write_policy(tmp_path / "trust.toml", keys)
    assert admit(run_hotfix, tmp_path, policy, tmp_path / "bundle").returncode == 0
    objects = render(tmp_path / "admission")
    template = by_kind(render(out), "Deployment")["spec"]["template"]
    generated = {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
                 "metadata": {**template["metadata"], "name": "vllm-5c9d-x", "namespace": "inference"}}
    kubernetes_validate.validate(generated, "1.35.0", strict=True)

    def decide(example):
        return judge(by_kind(objects, "ValidatingAdmissionPolicy"), example, params=by_kind(objects, "ConfigMap"),
                     engine=engine)

    def variant(change):
        example = copy.deepcopy(generated)
        change(example["spec"], example["metadata"])
        return example

    def volume(spec):
        return next(v for v in spec["volumes"] if v["name"] == k8s_image_volume.VOLUME)["image"]

    assert decide(generated) == []
    for change, words in (
        (lambda s, m: s["containers"][0].update(image="vllm/vllm-openai:v0.30.0"), "is not pinned by digest"),
        (lambda s, m: volume(s).update(reference=f"{REPOSITORY}:{made['tag']}"), "is not pinned by digest"),
        (lambda s, m: volume(s).update(reference=f"{REPOSITORY}@sha256:" + "9" * 64), "is not an approved hotfix bundle"),
        (lambda s, m: m["annotations"].update({FINGERPRINT_ANNOTATION: "hf1-0000000000000000"}), "is not approved for"),
        (lambda s, m: m["annotations"].pop(FINGERPRINT_ANNOTATION), f"the pod has no {FINGERPRINT_ANNOTATION}"),
    ):
        denied = decide(variant(change))
        assert denied and any(words in message for message in denied), denied
