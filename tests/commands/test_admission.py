"""`hotfix k8s --admission`: the policy, its binding and the approved-images ConfigMap render with
`kubectl kustomize` and validate against Kubernetes 1.35's schemas; the policy's CEL, run by two real
CEL implementations (tests/fixtures/cel.py) on generated pods, admits the approved pod and refuses
each unapproved one; bundles that are not what they say are approved for nothing."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest

from fixtures.cel import ENGINES, judge
from fixtures.kube import make_export, render
from vllm_hotfix.containers import admission_policy, bundle, oci, oci_layer
from vllm_hotfix.containers.readiness import expect_fingerprint_env
from vllm_hotfix_guard.settings import FINGERPRINT_ANNOTATION
from vllm_hotfix_guard.txn.hotfix_lock import load_lock
from vllm_hotfix_guard.txn.lock_check import expected_fingerprint

pytestmark = pytest.mark.tools

VLLM = "vllm/vllm-openai@sha256:" + "1" * 64
SIDECAR = "busybox:1.36@sha256:" + "2" * 64  # tag and digest: pinned (the kubelet pulls the digest)
BAKED = "registry.example/vllm-openai-hotfixed@sha256:" + "3" * 64


@pytest.fixture(scope="module")
def approved(tmp_path_factory, request):
    """A packed bundle, the policy approving it (and a baked image with the same lock), rendered."""
    import subprocess
    import sys

    tmp = tmp_path_factory.mktemp("admission")
    export = make_export(tmp / "export")

    def hotfix(*args):
        done = subprocess.run([sys.executable, "-m", "vllm_hotfix", *map(str, args)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done

    packed = json.loads(hotfix("pack", "--export-dir", export, "--to", tmp / "bundle", "--json").stdout)
    out = tmp / "admission"
    made = json.loads(hotfix("k8s", "--admission", "--approve", tmp / "bundle", "--approve",
                             f"{BAKED}={export / 'hotfix.lock'}", "--namespace", "inference", "--to", out, "--json").stdout)
    return {"tmp": tmp, "export": export, "packed": packed, "out": out, "made": made, "objects": render(out),
            "bundle_ref": f"registry.example/team/vllm-hotfix@{packed['digest']}",
            "fingerprint": expected_fingerprint(load_lock(export / "hotfix.lock"))}


def by_kind(objects, kind):
    return next(o for o in objects if o["kind"] == kind)


def pod(approved, *, image=VLLM, volume="bundle", fingerprint="same", init=SIDECAR, ephemeral=None) -> dict:
    """A pod as a Deployment of vLLM with a hotfix bundle makes it: the bundle as an image volume,
    one read-only subPath mount per file over site-packages and the lock, the fingerprint annotation."""
    reference = approved["bundle_ref"] if volume == "bundle" else volume
    lock = load_lock(approved["export"] / "hotfix.lock")
    mounts = [{"name": "hotfix-bundle", "mountPath": f"/usr/local/lib/python3.12/dist-packages/{f.path}",
               "subPath": f"site-packages/{f.path}", "readOnly": True} for f in lock.mounted_files()]
    mounts.append({"name": "hotfix-bundle", "mountPath": "/etc/vllm-hotfix/hotfix.lock", "subPath": "hotfix.lock",
                   "readOnly": True})
    spec = {"containers": [{"name": "vllm", "image": image, "volumeMounts": mounts if reference else [],
                            "env": [{"name": "HOTFIX_LOCK", "value": "/etc/vllm-hotfix/hotfix.lock"},
                                    expect_fingerprint_env()]}],
            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}]}
    if reference:
        spec["volumes"].append({"name": "hotfix-bundle", "image": {"reference": reference, "pullPolicy": "IfNotPresent"}})
    if init:
        spec["initContainers"] = [{"name": "wait", "image": init, "command": ["true"]}]
    if ephemeral:
        spec["ephemeralContainers"] = [{"name": "debug", "image": ephemeral}]
    annotations = {} if fingerprint is None else {
        FINGERPRINT_ANNOTATION: approved["fingerprint"] if fingerprint == "same" else fingerprint}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "vllm-0", "namespace": "inference", "labels": {"app": "vllm"}, "annotations": annotations},
            "spec": spec}


def test_every_resource_renders_and_validates_against_kubernetes_1_35(approved):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    objects = approved["objects"]
    assert sorted(o["kind"] for o in objects) == ["ConfigMap", "Namespace", "ValidatingAdmissionPolicy",
                                                  "ValidatingAdmissionPolicyBinding"]
    for obj in objects:
        kubernetes_validate.validate(obj, "1.35.0", strict=True)
    broken = copy.deepcopy(by_kind(objects, "ValidatingAdmissionPolicy"))
    broken["spec"]["validations"][0]["expresion"] = broken["spec"]["validations"][0].pop("expression")
    with pytest.raises(kubernetes_validate.ValidationError):  # the validator is strict: a typo is caught
        kubernetes_validate.validate(broken, "1.35.0", strict=True)
    for example in (pod(approved), pod(approved, ephemeral=SIDECAR)):
        kubernetes_validate.validate(example, "1.35.0", strict=True)  # the pods judged below are real 1.35 pods
    binding = by_kind(objects, "ValidatingAdmissionPolicyBinding")["spec"]
    assert binding["validationActions"] == ["Deny"]
    assert binding["paramRef"] == {"name": admission_policy.NAME, "namespace": admission_policy.PARAMS_NAMESPACE,
                                   "parameterNotFoundAction": "Deny"}
    assert binding["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"] == ["inference"]


def test_the_parameter_object_lists_the_bundle_s_digests_and_the_baked_image(approved):
    data = by_kind(approved["objects"], "ConfigMap")["data"]
    packed = approved["packed"]
    digests = {packed["digest"]} | {p["manifest"] for p in packed["platforms"]} | {BAKED.rpartition("@")[2]}
    assert set(data) == {d.removeprefix("sha256:") for d in digests}
    assert set(data.values()) == {approved["fingerprint"]} == {packed["fingerprint"]}
    assert approved["made"]["rendered_with"] and approved["made"]["validation_actions"] == ["Deny"]


@pytest.fixture(params=ENGINES, ids=lambda e: e.name)
def engine(request):
    return request.param()


def decide(approved, engine, example, **kw):
    objects = approved["objects"]
    return judge(by_kind(objects, "ValidatingAdmissionPolicy"), example, params=by_kind(objects, "ConfigMap"),
                 engine=engine, **kw)


def test_the_approved_pod_is_admitted(approved, engine):
    assert decide(approved, engine, pod(approved)) == []
    assert decide(approved, engine, pod(approved, init=None)) == []
    # the image route: an approved baked image with the same fingerprint, no bundle
    assert decide(approved, engine, pod(approved, image=BAKED, volume=None)) == []


@pytest.mark.parametrize("case, words", [
    ("container tag", "container image vllm/vllm-openai:v0.30.0 is not pinned by digest"),
    ("init container tag", "container image busybox:1.36 is not pinned by digest"),
    ("ephemeral container tag", "container image busybox:latest is not pinned by digest"),
    ("image volume tag", "image volume registry.example/team/vllm-hotfix:hf1-"),
    ("unknown bundle digest", "is not an approved hotfix bundle"),
    ("unapproved fingerprint", "the fingerprint hf1-0000000000000000 is not approved for registry.example/team/vllm-hotfix@sha256:"),
    ("missing annotation", f"the pod has no {FINGERPRINT_ANNOTATION} annotation"),
    ("malformed annotation", f"the pod has no {FINGERPRINT_ANNOTATION} annotation"),
    ("no approved image", "the pod uses no approved hotfix image"),
    ("baked image, other fingerprint", "is not approved for " + BAKED),
])
def test_each_unapproved_pod_is_refused_saying_why(approved, engine, case, words):
    tag = f"registry.example/team/vllm-hotfix:{approved['packed']['tag']}"
    example = {
        "container tag": lambda: pod(approved, image="vllm/vllm-openai:v0.30.0"),
        "init container tag": lambda: pod(approved, init="busybox:1.36"),
        "ephemeral container tag": lambda: pod(approved, ephemeral="busybox:latest"),
        "image volume tag": lambda: pod(approved, volume=tag),
        "unknown bundle digest": lambda: pod(approved, volume="registry.example/team/vllm-hotfix@sha256:" + "9" * 64),
        "unapproved fingerprint": lambda: pod(approved, fingerprint="hf1-0000000000000000"),
        "missing annotation": lambda: pod(approved, fingerprint=None),
        "malformed annotation": lambda: pod(approved, fingerprint=approved["fingerprint"] + " hf1-0000000000000000"),
        "no approved image": lambda: pod(approved, volume=None),
        "baked image, other fingerprint": lambda: pod(approved, image=BAKED, volume=None, fingerprint="hf1-0000000000000000"),
    }[case]()
    denied = decide(approved, engine, example)
    assert denied, case
    assert any(words in message for message in denied), denied


def _vllm(example: dict) -> dict:
    return example["spec"]["containers"][0]


def _lock_mount_from(example: dict, volume: dict, *, mount_path: str = "/etc/vllm-hotfix/hotfix.lock", **extra) -> dict:
    """``example`` with ``volume`` added and mounted at ``mount_path`` in the vLLM container (the bundle's own
    lock mount dropped when it sits at that very path)."""
    container = _vllm(example)
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["mountPath"] != mount_path]
    container["volumeMounts"].append({"name": volume["name"], "mountPath": mount_path, "readOnly": True, **extra})
    example["spec"]["volumes"].append(volume)
    return example


def _env(example: dict, *entries: dict, drop: str = "") -> dict:
    container = _vllm(example)
    container["env"] = [e for e in container["env"] if e["name"] != drop] + list(entries)
    return example


LOCK_CM = {"name": "lock", "configMap": {"name": "my-lock"}}


@pytest.mark.parametrize("case, words", [
    ("a ConfigMap over the lock path", "container vllm does not run with the approved bundle lock"),
    ("an emptyDir over the lock's folder", "container vllm does not run with the approved bundle lock"),
    ("the lock mount through a dot path", "container vllm does not run with the approved bundle lock"),
    ("the bundle mounted, the lock from elsewhere", "container vllm does not run with the approved bundle lock"),
    ("the bundle's other file at the lock path", "container vllm does not run with the approved bundle lock"),
    ("a literal expected fingerprint", "container vllm does not take HOTFIX_EXPECT_FINGERPRINT from the"),
    ("no expected fingerprint", "container vllm does not take HOTFIX_EXPECT_FINGERPRINT from the"),
    ("the expected fingerprint twice", "container vllm does not take HOTFIX_EXPECT_FINGERPRINT from the"),
    ("HOTFIX_LOCK unset", "container vllm does not set HOTFIX_LOCK once"),
    ("HOTFIX_LOCK from a ConfigMap key", "container vllm does not set HOTFIX_LOCK once"),
    ("HOTFIX_LOCK given twice", "container vllm does not set HOTFIX_LOCK once"),
    ("HOTFIX_LOCK a relative path", "container vllm does not set HOTFIX_LOCK once"),
    ("the bundle declared, mounted nowhere", "no container runs with the approved hotfix"),
])
def test_a_pod_whose_lock_the_policy_cannot_see_is_refused(approved, engine, case, words):
    """Issue 45: the lock a hotfixed container runs with must be the approved bundle's (or its approved image's),
    HOTFIX_LOCK set and HOTFIX_EXPECT_FINGERPRINT bound to the annotation the policy approved."""
    example = pod(approved)
    literal = {"name": "HOTFIX_EXPECT_FINGERPRINT", "value": approved["fingerprint"]}
    {
        "a ConfigMap over the lock path": lambda: _lock_mount_from(example, LOCK_CM, subPath="hotfix.lock"),
        "an emptyDir over the lock's folder": lambda: _lock_mount_from(example, {"name": "e", "emptyDir": {}},
                                                                       mount_path="/etc/vllm-hotfix"),
        "the lock mount through a dot path": lambda: _lock_mount_from(example, LOCK_CM, subPath="hotfix.lock",
                                                                      mount_path="/etc/vllm-hotfix/./hotfix.lock"),
        "the bundle mounted, the lock from elsewhere": lambda: _env(
            example, {"name": "HOTFIX_LOCK", "value": "/tmp/hotfix.lock"}, drop="HOTFIX_LOCK"),
        "the bundle's other file at the lock path": lambda: _vllm(example)["volumeMounts"][-1].update(
            subPath=_vllm(example)["volumeMounts"][0]["subPath"]),
        "a literal expected fingerprint": lambda: _env(example, literal, drop="HOTFIX_EXPECT_FINGERPRINT"),
        "no expected fingerprint": lambda: _env(example, drop="HOTFIX_EXPECT_FINGERPRINT"),
        "the expected fingerprint twice": lambda: _env(example, literal),
        "HOTFIX_LOCK unset": lambda: _env(example, drop="HOTFIX_LOCK"),
        "HOTFIX_LOCK from a ConfigMap key": lambda: _env(example, {"name": "HOTFIX_LOCK", "valueFrom": {
            "configMapKeyRef": {"name": "my-lock", "key": "path"}}}, drop="HOTFIX_LOCK"),
        "HOTFIX_LOCK given twice": lambda: _env(example, {"name": "HOTFIX_LOCK", "value": "/tmp/hotfix.lock"}),
        "HOTFIX_LOCK a relative path": lambda: _env(example, {"name": "HOTFIX_LOCK", "value": "hotfix.lock"},
                                                    drop="HOTFIX_LOCK"),
        "the bundle declared, mounted nowhere": lambda: _vllm(example).update(volumeMounts=[]),
    }[case]()
    denied = decide(approved, engine, example)
    assert any(words in message for message in denied), (case, denied)


def test_a_sidecar_and_the_whole_bundle_mounted_as_a_folder_are_admitted(approved, engine):
    example = pod(approved)
    example["spec"]["containers"].append({"name": "proxy", "image": SIDECAR})  # runs nothing of the bundle
    assert decide(approved, engine, example) == []
    whole = pod(approved)
    _vllm(whole)["volumeMounts"] = [{"name": "hotfix-bundle", "mountPath": "/etc/vllm-hotfix", "readOnly": True}]
    assert decide(approved, engine, whole) == []


def test_updates_are_judged_only_when_the_spec_or_the_annotation_changes(approved, engine):
    old = pod(approved, image="vllm/vllm-openai:v0.30.0")  # admitted before the policy existed
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"]["rollout"] = "2"
    assert decide(approved, engine, relabelled, operation="UPDATE", old=old) is None  # not judged: goes through
    good = pod(approved)
    debug = pod(approved, ephemeral="busybox:latest")  # `kubectl debug`: pods/ephemeralcontainers
    assert "not pinned by digest" in decide(approved, engine, debug, operation="UPDATE", old=good)[0]
    swapped = pod(approved, fingerprint="hf1-0000000000000000")
    assert decide(approved, engine, swapped, operation="UPDATE", old=good)
    assert decide(approved, engine, pod(approved, ephemeral=SIDECAR), operation="UPDATE", old=good) == []


def test_warn_only_dry_run_json_and_refusals(approved, run_hotfix, tmp_path):
    bundle_dir = approved["tmp"] / "bundle"
    out = tmp_path / "policy"
    dry = run_hotfix("k8s", "--admission", "--approve", bundle_dir, "--namespace", "a", "--to", out, "--dry-run")
    assert dry.returncode == 0 and "dry run: nothing was written" in dry.stdout and not out.exists()
    done = run_hotfix("k8s", "--admission", "--approve", bundle_dir, "--namespace", "a", "--warn-only", "--to", out, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["validation_actions"] == ["Warn", "Audit"]
    assert by_kind(render(out), "ValidatingAdmissionPolicyBinding")["spec"]["validationActions"] == ["Warn", "Audit"]
    for args, code, words in (
        (("--namespace", "a"), 2, "name what is approved"),
        (("--approve", bundle_dir), 2, "--namespace NS"),
        (("--approve", bundle_dir, "--namespace", "Bad_NS"), 2, "not a namespace name"),
        (("--approve", "nonsense", "--namespace", "a"), 2, "neither a bundle directory"),
        (("--approve", "reg/x@sha256:abc=lock", "--namespace", "a"), 2, "64 lowercase hex"),
        (("--approve", bundle_dir, "--namespace", "a", "--base", bundle_dir), 2, "--base: an option of the overlay"),
    ):
        failed = run_hotfix("k8s", "--admission", *args, "--to", tmp_path / "other")
        assert failed.returncode == code and words in failed.stderr and "Traceback" not in failed.stderr, (args, failed.stderr)
    overlay = run_hotfix("k8s", "--namespace", "a", "--base", bundle_dir, "--container", "x", "--to", tmp_path / "o")
    assert overlay.returncode == 2 and "--namespace: an option of --admission" in overlay.stderr
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "kustomization.yaml").write_text("resources: []\n")
    refused = run_hotfix("k8s", "--admission", "--approve", bundle_dir, "--namespace", "a", "--to", foreign)
    assert refused.returncode == 3 and (foreign / "kustomization.yaml").read_text() == "resources: []\n"
    assert not (tmp_path / "other").exists()


def _forge_layer(layout: Path, tar: bytes) -> Path:
    """``layout`` with its one layer replaced by ``tar`` (gzipped), every digest above it made to match."""
    _forge_compressed_layer(layout, oci.gzip_bytes(tar), oci.digest_of(tar))
    return layout


def _layout(tmp_path: Path, content: bundle.Content, annotations: dict | None = None) -> Path:
    notes = bundle.annotations(content) if annotations is None else annotations
    layout = oci.build(bundle.entries(content), platforms=(oci.Platform.parse("linux/amd64"),), ref_name="t",
                       labels=notes, annotations=notes, created_by="test")
    out = tmp_path / "forged"
    for name, data in layout.files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    return out


@pytest.mark.parametrize("forgery, words", [
    ("a blob changed", "does not hold what its descriptor says"),
    ("a file that is not the lock's", "is not the file hotfix.lock names"),
    ("a file the lock does not list", "which its lock does not list"),
    ("another fingerprint annotated", "annotation io.vllm-hotfix.fingerprint"),
    ("a symlink in the layer", "a link or device"),
    ("a member given twice", "is given twice"),
    ("a setuid file", "setuid"),
])
def test_a_bundle_that_is_not_what_it_says_is_approved_for_nothing(tmp_path, run_hotfix, forgery, words):
    import io
    import tarfile

    from vllm_hotfix_guard.txn.hotfix_lock import read_lock

    export = make_export(tmp_path / "export")
    lock_bytes, lock = read_lock(export / "hotfix.lock")
    files = {f.path: (export / f.export).read_bytes() for f in lock.mounted_files()}
    good = bundle.Content(lock=lock, lock_bytes=lock_bytes, files=files)
    if forgery == "a blob changed":
        layout = _layout(tmp_path, good)
        config = next(p for p in (layout / oci.BLOBS).iterdir() if b'"rootfs"' in p.read_bytes())
        config.write_bytes(config.read_bytes().replace(b'"amd64"', b'"arm64"'))
    elif forgery == "a file that is not the lock's":
        path = next(iter(files))
        layout = _layout(tmp_path, bundle.Content(lock=lock, lock_bytes=lock_bytes, files={**files, path: b"evil\n"}))
    elif forgery == "a file the lock does not list":
        layout = _layout(tmp_path, bundle.Content(lock=lock, lock_bytes=lock_bytes, files={**files, "vllm/extra.py": b"x"}))
    elif forgery == "another fingerprint annotated":
        layout = _layout(tmp_path, good, {**bundle.annotations(good), bundle.FINGERPRINT: "hf1-0000000000000000"})
    else:  # a layer of our own making, with honest digests all the way up
        members = {"a symlink in the layer": [("site-packages/vllm/config/cache.py", tarfile.SYMTYPE, b"", 0o777)],
                   "a member given twice": [("hotfix.lock", tarfile.REGTYPE, lock_bytes, 0o644)] * 2,
                   "a setuid file": [("hotfix.lock", tarfile.REGTYPE, lock_bytes, 0o4755)]}[forgery]
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            for name, kind, data, mode in members:
                info = tarfile.TarInfo(name)
                info.type, info.mode, info.size = kind, mode, len(data)
                info.linkname = "/etc/shadow" if kind == tarfile.SYMTYPE else ""
                tar.addfile(info, io.BytesIO(data))
        layout = _forge_layer(_layout(tmp_path, good), out.getvalue())
    done = run_hotfix("k8s", "--admission", "--approve", layout, "--namespace", "a", "--to", tmp_path / "policy")
    assert done.returncode == 8 and words in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "policy").exists()


def test_a_gzip_bomb_stops_at_the_cap():
    from vllm_hotfix_guard.errors import InvalidInput

    tar, _ = oci.tar_layer([oci.Entry(path="hotfix.lock", data=b"\0" * (1 << 20))])
    compressed = oci.gzip_bytes(tar)
    layer = oci.Descriptor(media_type=oci.MEDIA_LAYER, digest=oci.digest_of(compressed), size=len(compressed))
    with pytest.raises(InvalidInput, match="unpacks to more than 65536 bytes"):
        list(oci_layer.layer_members("bomb", lambda d, cap: compressed, layer, oci.digest_of(tar), cap=1 << 20,
                               content_cap=1 << 16))
    assert len(compressed) < 4096


def test_a_pod_of_the_configmap_overlay_is_admitted_with_its_image_approved(tmp_path, run_hotfix, engine):
    """The route without a bundle: `hotfix k8s` overlays a Deployment whose image is pinned; the pod its
    rendered template makes carries the fingerprint annotation, so approving (image digest, lock) admits
    it -- and the same pod with the image's tag is refused."""
    from fixtures.kube import DEPLOYMENT

    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    export = make_export(tmp_path / "export")
    base = tmp_path / "vllm.yaml"
    base.write_text(DEPLOYMENT.replace("vllm/vllm-openai:v0.30.0", VLLM))
    done = run_hotfix("k8s", "--export-dir", export, "--base", base, "--workload", "deployment/vllm", "--container",
                      "vllm", "--to", tmp_path / "overlay")
    assert done.returncode == 0, done.stderr
    template = by_kind(render(tmp_path / "overlay"), "Deployment")["spec"]["template"]
    generated = {"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "name": "vllm-7d4b9-x2",
                                                                  "namespace": "inference"}, "spec": template["spec"]}
    kubernetes_validate.validate(generated, "1.35.0", strict=True)
    fingerprint = expected_fingerprint(load_lock(export / "hotfix.lock"))
    made = admission_policy.build([admission_policy.Approval(digest=VLLM.rpartition(":")[2], fingerprint=fingerprint, source="test")],
                           namespaces=["inference"])
    policy, params = by_kind(made.objects, "ValidatingAdmissionPolicy"), by_kind(made.objects, "ConfigMap")
    assert judge(policy, generated, params=params, engine=engine) == []
    tagged = copy.deepcopy(generated)
    tagged["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.30.0"
    assert judge(policy, tagged, params=params, engine=engine)[0].startswith("container image vllm/vllm-openai:v0.30.0")


PEAK = '''
import resource, sys
from vllm_hotfix.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, code, file=sys.stderr)
'''


def _peak(tmp_path, *args) -> tuple[int, int, str]:
    """(exit code, peak RSS in MiB, stderr) of `hotfix ARGS` in a process of its own."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", PEAK, *map(str, args)], capture_output=True, text=True, cwd=tmp_path)
    *lines, last = done.stderr.strip().splitlines()
    peak, code = last.split()
    return int(code), int(peak), "\n".join(lines)


def _zeros_gzip(head: bytes, zeros: int) -> tuple[bytes, str]:
    """gzip of ``head`` + ``zeros`` zero bytes (made a chunk at a time) and the sha256 digest of what it unpacks to."""
    import zlib

    packer, digest = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS), hashlib.sha256(head)
    out = [packer.compress(head)]
    chunk = bytes(1 << 20)
    for _ in range(zeros >> 20):
        out.append(packer.compress(chunk))
        digest.update(chunk)
    out.append(packer.flush())
    return b"".join(out), "sha256:" + digest.hexdigest()


@pytest.mark.parametrize("bomb", ["a member declared 1 GiB", "1 GiB of zeros after the tar"])
def test_a_gzip_bomb_is_refused_in_bounded_memory(tmp_path, bomb):
    """Issue 45: a refused bomb peaked at 2.1 GB (the tar inflated whole, then a member read whole); now the
    layer streams (1 MiB inflated at a time) and a member is read only once its header says it fits."""
    import io
    import tarfile

    from vllm_hotfix_guard.txn.hotfix_lock import read_lock

    export = make_export(tmp_path / "export")
    lock_bytes, lock = read_lock(export / "hotfix.lock")
    files = {f.path: (export / f.export).read_bytes() for f in lock.mounted_files()}
    layout = _layout(tmp_path, bundle.Content(lock=lock, lock_bytes=lock_bytes, files=files))
    huge = (1 << 30) + (16 << 20)  # over admission.CONTENT_LIMIT
    if bomb == "a member declared 1 GiB":
        info = tarfile.TarInfo("hotfix.lock")
        info.size = huge
        compressed, diff_id = _zeros_gzip(info.tobuf(format=tarfile.PAX_FORMAT), 16 << 20)  # refused at its header
    else:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            info = tarfile.TarInfo("hotfix.lock")
            info.size = len(lock_bytes)
            tar.addfile(info, io.BytesIO(lock_bytes))
        compressed, diff_id = _zeros_gzip(out.getvalue(), huge)
    _forge_compressed_layer(layout, compressed, diff_id)
    code, peak, stderr = _peak(tmp_path, "k8s", "--admission", "--approve", layout, "--namespace", "a", "--to",
                               tmp_path / "policy")
    assert code == 8 and "unpacks to more than" in stderr, stderr
    assert peak < 400, f"peak RSS {peak} MiB"
    print(f"{bomb}: peak RSS {peak} MiB")
    assert not (tmp_path / "policy").exists()


def test_an_index_of_hundreds_of_manifests_is_refused_at_once(tmp_path, run_hotfix):
    """Issue 45: an index of 4,000 manifests sharing one layer took 54 s and 2.2 GB (the layer unpacked once
    per manifest): an index lists at most oci.MAX_IMAGES, and a layer shared by platforms is unpacked once."""
    import time

    from vllm_hotfix_guard.txn.hotfix_lock import read_lock

    export = make_export(tmp_path / "export")
    lock_bytes, lock = read_lock(export / "hotfix.lock")
    files = {f.path: (export / f.export).read_bytes() for f in lock.mounted_files()}
    good = bundle.Content(lock=lock, lock_bytes=lock_bytes, files=files)
    notes = bundle.annotations(good)
    many = tuple(oci.Platform.parse(f"linux/amd64/v{i}") for i in range(400))
    built = oci.build(bundle.entries(good), platforms=many, ref_name="t", labels=notes, annotations=notes,
                      created_by="test")
    for name, data in built.files.items():
        (tmp_path / "many" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "many" / name).write_bytes(data)
    started = time.monotonic()
    done = run_hotfix("k8s", "--admission", "--approve", tmp_path / "many", "--namespace", "a", "--to", tmp_path / "p")
    assert done.returncode == 8 and "lists 400 manifests" in done.stderr, done.stderr
    assert time.monotonic() - started < 20 and not (tmp_path / "p").exists()


def _forge_compressed_layer(layout: Path, compressed: bytes, diff_id: str) -> None:
    """``layout``'s one layer replaced by ``compressed`` (diff_id given), every digest above it made to match."""
    blobs = layout / oci.BLOBS

    def put(data: bytes) -> dict:
        (blobs / hashlib.sha256(data).hexdigest()).write_bytes(data)
        return {"digest": oci.digest_of(data), "size": len(data)}

    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((blobs / index["manifests"][0]["digest"].partition(":")[2]).read_text())
    config = json.loads((blobs / manifest["config"]["digest"].partition(":")[2]).read_text())
    config["rootfs"]["diff_ids"] = [diff_id]
    manifest["config"].update(put(oci.canonical_json(config)))
    manifest["layers"][0].update(put(compressed))
    index["manifests"][0].update(put(oci.canonical_json(manifest)))
    (layout / "index.json").write_text(json.dumps(index))
