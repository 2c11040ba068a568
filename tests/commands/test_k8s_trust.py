"""`hotfix k8s` with a signed lock: the signature files travel beside the lock (read-only subPath mounts in
/etc/vllm-hotfix/, where the guard looks), and `--trust-configmap NAME` mounts the trust policy from a
ConfigMap the overlay does not generate; the lock's own ConfigMap is refused as the policy's source.
Rendered by the real `kubectl kustomize`, validated against the OpenAPI schemas."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from fixtures.kube import DEPLOYMENT, make_export, render, validate

pytestmark = pytest.mark.tools

if shutil.which("minisign") is None:
    pytest.skip("minisign is not installed (apt-get install -y minisign)", allow_module_level=True)


@pytest.fixture
def signed_export(tmp_path, run_hotfix):
    export = make_export(tmp_path / "export")
    pub, key = tmp_path / "release.pub", tmp_path / "release.key"
    subprocess.run(["minisign", "-G", "-W", "-f", "-p", pub, "-s", key], check=True, capture_output=True)
    done = run_hotfix("sign", export / "hotfix.lock", "--key", key)
    assert done.returncode == 0, done.stderr
    (signature,) = export.glob("hotfix.lock*.minisig")  # hotfix.lock.minisig: one signer
    base = tmp_path / "rendered.yaml"
    base.write_text(DEPLOYMENT)
    return export, signature, base, tmp_path / "overlay"


def test_signatures_beside_the_lock_and_the_policy_from_its_own_configmap(signed_export, run_hotfix):
    export, signature, base, out = signed_export
    done = run_hotfix("k8s", "--export-dir", export, "--base", base, "--to", out, "--workload", "deployment/vllm",
                      "--container", "vllm", "--trust-configmap", "release-trust")
    assert done.returncode == 0, done.stderr
    assert "+ hotfix.lock + 1 signature file(s) in 1 ConfigMap(s)" in done.stdout
    objects = render(out)
    validate(objects)
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    sig = mounts[f"/etc/vllm-hotfix/{signature.name}"]
    assert sig["readOnly"] is True and sig["subPath"] == signature.name
    generated = {o["metadata"]["name"]: o["data"] for o in objects if o["kind"] == "ConfigMap"}
    volumes = {v["name"]: v["configMap"] for v in pod["volumes"] if "configMap" in v}  # the user's emptyDir too
    assert generated[volumes[sig["name"]]["name"]][signature.name] == signature.read_text()  # the signed bytes
    trust = mounts["/etc/vllm-hotfix-trust"]
    assert trust["readOnly"] is True and "subPath" not in trust  # a directory mount: a new policy is seen
    assert volumes[trust["name"]] == {"name": "release-trust", "items": [{"key": "trust.toml", "path": "trust.toml"}]}
    assert "release-trust" not in generated  # never generated from the export
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HOTFIX_TRUST"] == "/etc/vllm-hotfix-trust/trust.toml" and env["HOTFIX_LOCK"] == "/etc/vllm-hotfix/hotfix.lock"


@pytest.mark.parametrize("name", ["vllm-hotfix-0", "vllm-hotfix", "vllm-hotfix-1"])
def test_the_locks_own_configmap_is_refused_as_the_policys_source(signed_export, run_hotfix, name):
    export, _, base, out = signed_export
    done = run_hotfix("k8s", "--export-dir", export, "--base", base, "--to", out, "--workload", "deployment/vllm",
                      "--container", "vllm", "--trust-configmap", name, "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "that is the lock's own ConfigMap" in done.stderr and not out.exists()


def test_without_the_option_the_signatures_still_travel(signed_export, run_hotfix):
    export, signature, base, out = signed_export
    done = run_hotfix("k8s", "--export-dir", export, "--base", base, "--to", out, "--workload", "deployment/vllm",
                      "--container", "vllm", "--json")
    assert done.returncode == 0, done.stderr
    assert f"/etc/vllm-hotfix/{signature.name}" in json.loads(done.stdout)["checked"]["mounts"]
    (container,) = next(o for o in render(out) if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "HOTFIX_TRUST" not in {e["name"] for e in container["env"]}
