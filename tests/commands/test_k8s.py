"""`hotfix k8s`: the overlay renders with `kubectl kustomize`, validates against the OpenAPI schemas of
two Kubernetes minor versions, mounts every file read-only where the lock says, leaves the user's
manifests and every other container alone; and too much for ConfigMaps is refused in favour of bake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.kube import DEPLOYMENT, HELM_RENDERED, LWS, SITE, STATEFULSET, make_export, render, validate
from vllm_hotfix.txn.lockfile import load_lock

LOCK = "/etc/vllm-hotfix/hotfix.lock"


def overlay(tmp_path: Path, run_hotfix, manifest: str, *args: str, export_sizes=None, base_dir: bool = False):
    export = make_export(tmp_path / "export", export_sizes)
    if base_dir:
        base = tmp_path / "base"
        base.mkdir()
        (base / "workload.yaml").write_text(manifest)
        (base / "kustomization.yaml").write_text("resources: [workload.yaml]\n")
    else:
        base = tmp_path / "rendered.yaml"
        base.write_text(manifest)
    out = tmp_path / "overlay"
    done = run_hotfix("k8s", "--export-dir", export, "--base", base, "--to", out, *args, "--json")
    return done, export, base, out


def expected_mounts(export: Path) -> dict[str, str]:
    lock = load_lock(export / "hotfix.lock")
    files = {f"{SITE}/{f.path}": (export / f.export).read_text() for h in lock.hotfixes for f in h.files}
    files[LOCK] = (export / "hotfix.lock").read_text()
    return files


def mounted(objects: list[dict], container: dict, pod_spec: dict) -> dict[str, str]:
    """mountPath -> content, following each read-only subPath mount to its rendered ConfigMap key."""
    configmaps = {o["metadata"]["name"]: o.get("data", {}) for o in objects if o["kind"] == "ConfigMap"}
    volumes = {v["name"]: v["configMap"]["name"] for v in pod_spec.get("volumes", []) if "configMap" in v}
    out = {}
    for m in container.get("volumeMounts", []):
        if m["name"] in volumes:
            assert m["readOnly"] is True and m["subPath"]
            out[m["mountPath"]] = configmaps[volumes[m["name"]]][m["subPath"]]
    return out


def env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def by_kind(objects, kind):
    return next(o for o in objects if o["kind"] == kind)


@pytest.mark.parametrize("base_dir", [False, True], ids=["manifest-file", "kustomization-dir"])
def test_deployment(tmp_path, run_hotfix, base_dir):
    done, export, base, out = overlay(tmp_path, run_hotfix, DEPLOYMENT, "--workload", "deployment/vllm",
                                      "--container", "vllm", base_dir=base_dir)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["patched"] == ["vllm"]
    objects = render(out)
    validate(objects)
    deployment = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert mounted(objects, container, pod) == expected_mounts(export)
    assert {"name": "shm", "mountPath": "/dev/shm"} in container["volumeMounts"]  # the user's own stay
    assert env(container) == {"NCCL_DEBUG": "WARN", "HOTFIX_LOCK": LOCK, "HOTFIX_STRICT": "1"}
    assert container["image"] == "vllm/vllm-openai:v0.30.0" and deployment["spec"]["replicas"] == 2
    manifest = base / "workload.yaml" if base_dir else base
    assert manifest.read_text() == DEPLOYMENT  # only read


def test_statefulset_no_strict(tmp_path, run_hotfix):
    done, export, _, out = overlay(tmp_path, run_hotfix, STATEFULSET, "--kind", "StatefulSet", "--name", "vllm-ascend",
                                   "--container", "vllm", "--no-strict")
    assert done.returncode == 0, done.stderr
    objects = render(out)
    validate(objects)
    pod = by_kind(objects, "StatefulSet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert mounted(objects, container, pod) == expected_mounts(export)
    assert env(container) == {"HOTFIX_LOCK": LOCK, "HOTFIX_STRICT": "0"}


def test_leaderworkerset_leader_and_worker_templates(tmp_path, run_hotfix):
    done, export, _, out = overlay(tmp_path, run_hotfix, LWS, "--workload", "leaderworkerset/vllm",
                                   "--container", "vllm-leader", "--container", "vllm-worker")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["patched"] == ["leaderTemplate/vllm-leader", "workerTemplate/vllm-worker"]
    objects = render(out)
    validate(objects)  # the CRD's pod templates as PodTemplateSpec
    lwt = by_kind(objects, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    leader, worker = lwt["leaderTemplate"]["spec"], lwt["workerTemplate"]["spec"]
    assert [c["name"] for c in leader["containers"]] == ["vllm-leader", "metrics"]
    assert mounted(objects, leader["containers"][0], leader) == expected_mounts(export)
    assert mounted(objects, worker["containers"][0], worker) == expected_mounts(export)
    assert env(leader["containers"][0]) == {"A": "1", "HOTFIX_LOCK": LOCK, "HOTFIX_STRICT": "1"}
    assert env(worker["containers"][0]) == {"HOTFIX_LOCK": LOCK, "HOTFIX_STRICT": "1"}
    assert "volumeMounts" not in leader["containers"][1] and "env" not in leader["containers"][1]
    assert leader["containers"][0]["command"][0] == "sh" and worker["volumes"][0]["name"] == "shm"
    configmaps = {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"}
    assert {v["configMap"]["name"] for v in worker["volumes"] if "configMap" in v} == configmaps  # hashed names followed


def test_helm_rendered_deployment_with_two_containers(tmp_path, run_hotfix):
    done, export, _, out = overlay(tmp_path, run_hotfix, HELM_RENDERED, "--workload", "deployment/vllm-glm-deployment-vllm",
                                   "--container", "vllm")
    assert done.returncode == 0, done.stderr
    objects = render(out)
    validate(objects)
    assert by_kind(objects, "Service")["metadata"]["name"] == "vllm-glm-engine-service"
    pod = by_kind(objects, "Deployment")["spec"]["template"]["spec"]
    engine, sidecar = pod["containers"]
    assert (engine["name"], sidecar["name"]) == ("vllm", "lmcache-sidecar")
    assert mounted(objects, engine, pod) == expected_mounts(export)
    assert sidecar["volumeMounts"] == [{"name": "vllm-storage", "mountPath": "/data"}] and "env" not in sidecar
    assert engine["ports"][0]["containerPort"] == 8000


def test_unknown_container_and_workload_are_usage_errors(tmp_path, run_hotfix):
    done, *_ = overlay(tmp_path, run_hotfix, DEPLOYMENT, "--workload", "deployment/vllm", "--container", "engine")
    assert done.returncode == 2 and "has no container engine" in done.stderr and "its containers: vllm" in done.stderr
    done, *_ = overlay(tmp_path, run_hotfix, LWS, "--workload", "leaderworkerset/other", "--container", "vllm-leader")
    assert done.returncode == 2 and "not found in the manifests given" in done.stderr
    done, *_ = overlay(tmp_path, run_hotfix, LWS, "--workload", "leaderworkerset/vllm", "--container", "vllm-leader")
    assert done.returncode == 2 and "workerTemplate has none of the containers vllm-leader" in done.stderr


def test_split_over_configmaps_renders_and_too_big_names_bake(tmp_path, run_hotfix):
    sizes = {f"vllm/big_{i}.py": 600 * 1024 for i in range(3)}
    done, export, _, out = overlay(tmp_path, run_hotfix, DEPLOYMENT, "--workload", "deployment/vllm",
                                   "--container", "vllm", export_sizes=sizes)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert len(report["configmaps"]) == 3 and all(cm["bytes"] <= 1024 * 1024 for cm in report["configmaps"])
    objects = render(out)
    validate(objects)
    pod = by_kind(objects, "Deployment")["spec"]["template"]["spec"]
    assert mounted(objects, pod["containers"][0], pod) == expected_mounts(export)

    done, *_ = overlay(tmp_path / "huge", run_hotfix, DEPLOYMENT, "--workload", "deployment/vllm",
                       "--container", "vllm", export_sizes={"vllm/huge.py": 1024 * 1024})
    assert done.returncode == 3 and "does not fit in one ConfigMap" in done.stderr and "hotfix bake" in done.stderr


def test_rerun_rewrites_its_overlay_but_never_a_foreign_directory(tmp_path, run_hotfix):
    done, export, base, out = overlay(tmp_path, run_hotfix, DEPLOYMENT, "--workload", "deployment/vllm",
                                      "--container", "vllm", base_dir=True)
    assert done.returncode == 0, done.stderr
    again = run_hotfix("k8s", "--export-dir", export, "--base", base, "--to", out, "--workload", "deployment/vllm",
                       "--container", "vllm")
    assert again.returncode == 0, again.stderr
    before = {p: p.read_bytes() for p in base.iterdir()}
    into_base = run_hotfix("k8s", "--export-dir", export, "--base", base, "--to", base, "--workload", "deployment/vllm",
                           "--container", "vllm")
    assert into_base.returncode == 3 and "not an overlay written by `hotfix k8s`" in into_base.stderr
    assert {p: p.read_bytes() for p in base.iterdir()} == before
