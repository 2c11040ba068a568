"""`hotfix k8s`: the overlay renders with `kubectl kustomize`, validates against the OpenAPI schemas of
two Kubernetes minor versions, mounts every file read-only where the lock says, leaves the user's
manifests and every other container alone; and too much for ConfigMaps is refused in favour of bake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.kube import DEPLOYMENT, HELM_RENDERED, LWS, SITE, STATEFULSET, make_export, render, validate
from vllm_hotfix_guard.settings import FINGERPRINT_ANNOTATION
from vllm_hotfix_guard.txn.hotfix_lock import load_lock
from vllm_hotfix_guard.txn.lock_check import expected_fingerprint

pytestmark = pytest.mark.tools

LOCK = "/etc/vllm-hotfix/hotfix.lock"
READY = {"HOTFIX_READY_DIR": "/run/vllm-hotfix/ready"}
PROBE = {"exec": {"command": ["python3", "-I", "-m", "vllm_hotfix_guard", "ready"]}, "periodSeconds": 10, "timeoutSeconds": 5,
         "failureThreshold": 3}


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
    site = export / "guard" / "site-packages"  # the guard's tree, mounted file by file beside them
    files.update((f"{SITE}/{p.relative_to(site).as_posix()}", p.read_text()) for p in site.rglob("*") if p.is_file())
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
    """The plain variables (HOTFIX_EXPECT_FINGERPRINT comes from the downward API: ``from_annotation``)."""
    return {e["name"]: e["value"] for e in container.get("env", []) if "valueFrom" not in e}


def from_annotation(container: dict) -> dict:
    """HOTFIX_EXPECT_FINGERPRINT's entry: the pod's own fingerprint annotation, which `ready` checks the lock against."""
    return next(e for e in container.get("env", []) if e["name"] == "HOTFIX_EXPECT_FINGERPRINT")


EXPECT = {"name": "HOTFIX_EXPECT_FINGERPRINT",
          "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['vllm-hotfix.io/fingerprint']"}}}


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
    assert env(container) == {"NCCL_DEBUG": "WARN", "HOTFIX_LOCK": LOCK, "HOTFIX_STRICT": "1", **READY}
    assert from_annotation(container) == EXPECT  # `ready` proves the mounted lock is the annotated one
    # readiness (docs/readiness.md): the guard's records in a memory-backed emptyDir, `ready` the probe
    assert container["readinessProbe"] == PROBE
    assert {"name": "vllm-hotfix-ready", "mountPath": READY["HOTFIX_READY_DIR"]} in container["volumeMounts"]
    assert {"name": "vllm-hotfix-ready", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}} in pod["volumes"]
    assert container["image"] == "vllm/vllm-openai:v0.30.0" and deployment["spec"]["replicas"] == 2
    # the fingerprint `hotfix k8s --admission`'s policy checks, beside the labels the base gives
    assert deployment["spec"]["template"]["metadata"] == {"labels": {"app": "vllm"}, "annotations": {
        FINGERPRINT_ANNOTATION: expected_fingerprint(load_lock(export / "hotfix.lock"))}}
    manifest = base / "workload.yaml" if base_dir else base
    assert manifest.read_text() == DEPLOYMENT  # only read
    written = [line.strip().lstrip("- ") for f in sorted(out.glob("*.yaml")) for line in f.read_text().splitlines()]
    folded = [line for line in written if line in ("mountPath:", "subPath:", "value:", "path:")]
    assert folded == []  # no path folded onto the next line, however long


def test_every_yaml_written_keeps_a_long_path_on_its_key_line():
    from vllm_hotfix.containers.k8s_overlay import dump

    path = "/opt/venv/lib/python3.12/site-packages/" + "/".join(["deeply-nested-package-folder"] * 6) + "/module.py"
    text = dump([{"spec": {"containers": [{"volumeMounts": [{"name": "hotfix-0", "mountPath": path}]}]}}]).decode()
    assert f"mountPath: {path}\n" in text


def test_a_readiness_probe_of_the_base_is_kept_inside_ours_never_replaced(tmp_path, run_hotfix):
    probed = DEPLOYMENT.replace("        env:\n", "        readinessProbe:\n          httpGet: {path: /health, port: 8000}\n"
                                "          initialDelaySeconds: 60\n        env:\n", 1)
    assert probed != DEPLOYMENT
    done, _, _, out = overlay(tmp_path, run_hotfix, probed, "--workload", "deployment/vllm", "--container", "vllm")
    assert done.returncode == 0, done.stderr
    objects = render(out)
    validate(objects)
    (container,) = by_kind(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    # one handler (an httpGet beside an exec is refused by the API): an exec running `ready`, then the base's
    # own httpGet (tests/commands/test_k8s_probes.py)
    assert json.loads(container["readinessProbe"]["exec"]["command"][5]) == {"httpGet": {"path": "/health", "port": 8000}}
    assert container["readinessProbe"]["initialDelaySeconds"] == 60


def test_statefulset_no_strict(tmp_path, run_hotfix):
    done, export, _, out = overlay(tmp_path, run_hotfix, STATEFULSET, "--kind", "StatefulSet", "--name", "vllm-ascend",
                                   "--container", "vllm", "--no-strict", "--no-readiness")
    assert done.returncode == 0, done.stderr
    objects = render(out)
    validate(objects)
    pod = by_kind(objects, "StatefulSet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert mounted(objects, container, pod) == expected_mounts(export)
    assert env(container) == {"HOTFIX_LOCK": LOCK, "HOTFIX_STRICT": "0"}
    assert from_annotation(container) == EXPECT
    assert "readinessProbe" not in container and all("emptyDir" not in v for v in pod.get("volumes", []))


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
    assert env(leader["containers"][0]) == {"A": "1", "HOTFIX_LOCK": LOCK, "HOTFIX_STRICT": "1", **READY}
    assert env(worker["containers"][0]) == {"HOTFIX_LOCK": LOCK, "HOTFIX_STRICT": "1", **READY}
    assert from_annotation(leader["containers"][0]) == from_annotation(worker["containers"][0]) == EXPECT
    # the leader's `vllm serve` is what `ready` reads; a worker pod's processes are told by hand (docs/readiness.md)
    assert leader["containers"][0]["readinessProbe"] == PROBE and "readinessProbe" not in worker["containers"][0]
    assert "volumeMounts" not in leader["containers"][1] and "env" not in leader["containers"][1]
    assert leader["containers"][0]["command"][0] == "sh" and worker["volumes"][0]["name"] == "shm"
    configmaps = {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"}
    assert {v["configMap"]["name"] for v in worker["volumes"] if "configMap" in v} == configmaps  # hashed names followed
    annotation = {FINGERPRINT_ANNOTATION: expected_fingerprint(load_lock(export / "hotfix.lock"))}
    assert lwt["leaderTemplate"]["metadata"] == {"labels": {"role": "leader"}, "annotations": annotation}
    assert lwt["workerTemplate"]["metadata"] == {"annotations": annotation}  # the base has no metadata there


def test_leaderworkerset_templates_with_annotations_keep_theirs(tmp_path, run_hotfix):
    annotated = LWS.replace("        labels: {role: leader}\n", "        labels: {role: leader}\n        annotations: {team/x: keep}\n")
    assert annotated != LWS
    done, export, _, out = overlay(tmp_path, run_hotfix, annotated, "--workload", "leaderworkerset/vllm",
                                   "--container", "vllm-leader", "--container", "vllm-worker")
    assert done.returncode == 0, done.stderr
    leader = by_kind(render(out), "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    assert leader["metadata"]["annotations"] == {
        "team/x": "keep", FINGERPRINT_ANNOTATION: expected_fingerprint(load_lock(export / "hotfix.lock"))}


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


def test_unknown_container_and_workload_are_refused_naming_what_the_base_has(tmp_path, run_hotfix):
    done, *_ = overlay(tmp_path / "a", run_hotfix, DEPLOYMENT, "--workload", "deployment/vllm", "--container", "engine")
    assert done.returncode == 3 and "has no container engine" in done.stderr and "its containers: vllm" in done.stderr
    done, *_ = overlay(tmp_path / "b", run_hotfix, LWS, "--workload", "leaderworkerset/other", "--container", "vllm-leader")
    assert done.returncode == 3 and "leaderworkerset/other is not in the manifests given" in done.stderr
    assert "it contains LeaderWorkerSet/vllm" in done.stderr
    done, *_ = overlay(tmp_path / "c", run_hotfix, LWS, "--workload", "leaderworkerset/vllm", "--container", "vllm-leader")
    assert done.returncode == 3 and "workerTemplate has none of the containers vllm-leader" in done.stderr
    for where in ("a", "b", "c"):
        assert not (tmp_path / where / "overlay").exists()


@pytest.mark.parametrize("base_dir", [False, True], ids=["manifest-file", "kustomization-dir"])
def test_a_typo_in_the_workload_is_refused_and_nothing_is_written(tmp_path, run_hotfix, base_dir):
    """Issue 24 item 1: `--workload deployment/nope` exited 0 and the overlay mounted nothing."""
    done, _, _, out = overlay(tmp_path, run_hotfix, HELM_RENDERED, "--workload", "deployment/nope", "--container", "vllm",
                              base_dir=base_dir)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "deployment/nope is not in the manifests given; nothing was written" in done.stderr
    assert "(it contains " in done.stderr and "Deployment/vllm-glm-deployment-vllm" in done.stderr
    assert "Service/vllm-glm-engine-service" in done.stderr
    assert json.loads(done.stdout)["error"]["exit_code"] == 3
    assert not out.exists() and not list(tmp_path.glob(".overlay.*"))


def test_the_base_is_read_as_kustomize_renders_it(tmp_path, run_hotfix):
    """A kustomization with a namePrefix and its manifest in a sub-directory: the workload is found under
    its rendered name, and the written overlay is checked by a real render."""
    export = make_export(tmp_path / "export")
    base = tmp_path / "prod"
    (base / "upstream").mkdir(parents=True)
    (base / "upstream" / "deployment.yaml").write_text(DEPLOYMENT)
    (base / "upstream" / "kustomization.yaml").write_text("resources: [deployment.yaml]\n")
    (base / "kustomization.yaml").write_text("namePrefix: prod-\nresources: [upstream]\n")
    out = tmp_path / "overlay"
    wrong = run_hotfix("k8s", "--export-dir", export, "--base", base, "--to", out, "--workload", "deployment/vllm",
                       "--container", "vllm")
    assert wrong.returncode == 3 and "it contains Deployment/prod-vllm" in wrong.stderr, wrong.stderr
    done = run_hotfix("k8s", "--export-dir", export, "--base", base, "--to", out, "--workload", "deployment/prod-vllm",
                      "--container", "vllm")
    assert done.returncode == 0, done.stderr
    assert "checked: `" in done.stdout and f"renders all {len(expected_mounts(export))} mount(s) with the exported bytes, and HOTFIX_LOCK, HOTFIX_STRICT" in done.stdout
    objects = render(out)
    pod = by_kind(objects, "Deployment")["spec"]["template"]["spec"]
    assert mounted(objects, pod["containers"][0], pod) == expected_mounts(export)
    # without kustomize, the local resources are followed: the same workload (by its file name) is found
    no_render = run_hotfix("k8s", "--export-dir", export, "--base", base, "--to", tmp_path / "o2", "--workload",
                           "deployment/vllm", "--container", "vllm", env={"HOTFIX_KUBECTL": ""})
    assert no_render.returncode == 0, no_render.stderr
    assert "the overlay was not rendered; check it with `kubectl kustomize" in no_render.stderr


def test_a_render_that_fails_leaves_the_earlier_overlay_and_dry_run_writes_nothing(tmp_path, run_hotfix):
    done, export, base, out = overlay(tmp_path, run_hotfix, DEPLOYMENT, "--workload", "deployment/vllm",
                                      "--container", "vllm")
    assert done.returncode == 0, done.stderr
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    twice = tmp_path / "twice.yaml"  # the same Deployment twice (two `helm template` runs concatenated)
    twice.write_text(DEPLOYMENT + "---\n" + DEPLOYMENT)
    failed = run_hotfix("k8s", "--export-dir", export, "--base", twice, "--to", out, "--workload", "deployment/vllm",
                        "--container", "vllm")
    assert failed.returncode == 8, failed.stdout + failed.stderr
    assert "cannot render the overlay: " in failed.stderr and "nothing was written" in failed.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert not list(tmp_path.glob(".overlay.*"))

    dry = run_hotfix("k8s", "--export-dir", export, "--base", base, "--to", tmp_path / "new", "--workload",
                     "deployment/vllm", "--container", "vllm", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["dry_run"] is True and "kustomization.yaml" in report["files"] and report["rendered_with"]
    assert LOCK in report["checked"]["mounts"] and report["checked"]["env"]["HOTFIX_STRICT"] == "1"
    assert not (tmp_path / "new").exists() and not list(tmp_path.glob(".new.*"))


def test_the_render_check_finds_what_a_render_lacks(tmp_path, run_hotfix):
    """containers.k8s_render.check_render on a real `kubectl kustomize` render, then on copies with one thing missing."""
    import copy

    from vllm_hotfix.containers import k8s_overlay, k8s_render

    export = make_export(tmp_path / "export")
    lock = load_lock(export / "hotfix.lock")
    exported = {f.export: (export / f.export).read_bytes() for h in lock.hotfixes for f in h.files}
    workload = k8s_overlay.parse_workload("deployment/vllm", None, None)
    built = k8s_overlay.build(lock, exported, (export / "hotfix.lock").read_bytes(), workload, ("vllm",),
                      resources=("base/rendered.yaml",), manifests=k8s_overlay.load_all(DEPLOYMENT, source="d"))
    (tmp_path / "o" / "base").mkdir(parents=True)
    (tmp_path / "o" / "base" / "rendered.yaml").write_text(DEPLOYMENT)
    for rel, data in built.files.items():
        (tmp_path / "o" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "o" / rel).write_bytes(data)
    objects = render(tmp_path / "o")
    assert k8s_render.check_render(objects, workload, built) == []

    mamba = f"{SITE}/vllm/v1/worker/gpu/model_states/mamba_hybrid.py"

    def broken(change):
        objs = copy.deepcopy(objects)
        change(by_kind(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0], by_kind(objs, "ConfigMap"))
        return k8s_render.check_render(objs, workload, built)

    dropped = broken(lambda c, cm: c.update(volumeMounts=[m for m in c["volumeMounts"] if m["mountPath"] != mamba]))
    assert dropped == [f"Deployment/vllm container vllm: no mount at {mamba}"]
    assert "is not a read-only subPath mount" in broken(lambda c, cm: next(m for m in c["volumeMounts"]
                                                                          if m["mountPath"] == LOCK).update(readOnly=False))[0]
    key = next(m["subPath"] for m in by_kind(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
               if m["mountPath"] == mamba)
    assert f"{mamba} would not hold the exported bytes" in broken(lambda c, cm: cm["data"].update({key: "other"}))[0]
    assert "HOTFIX_STRICT is None" in broken(lambda c, cm: c.update(env=[e for e in c["env"] if e["name"] != "HOTFIX_STRICT"]))[0]
    unannotated = copy.deepcopy(objects)
    by_kind(unannotated, "Deployment")["spec"]["template"]["metadata"].pop("annotations")
    assert k8s_render.check_render(unannotated, workload, built) == [
        f"Deployment/vllm template: annotation {FINGERPRINT_ANNOTATION} is None, not {built.annotations[FINGERPRINT_ANNOTATION]!r}"]
    assert k8s_render.check_render([o for o in objects if o["kind"] != "Deployment"], workload, built) == ["the render has no Deployment/vllm"]


def test_split_over_configmaps_renders_and_too_big_names_bake(tmp_path, run_hotfix):
    sizes = {f"vllm/big_{i}.py": 600 * 1024 for i in range(3)}
    done, export, _, out = overlay(tmp_path, run_hotfix, DEPLOYMENT, "--workload", "deployment/vllm",
                                   "--container", "vllm", export_sizes=sizes)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert len(report["configmaps"]) in (3, 4) and all(cm["bytes"] <= 1024 * 1024 for cm in report["configmaps"])
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


def test_the_render_check_wants_the_fingerprint_from_the_pod_s_annotation():
    """k8s_overlay.env_problems: a rendered container whose HOTFIX_EXPECT_FINGERPRINT is a plain value, another
    field, or missing is a problem (the overlay is refused); the downward-API entry as written is none."""
    from vllm_hotfix.containers.k8s_overlay import Overlay, env_problems

    overlay = Overlay(env={"HOTFIX_LOCK": LOCK}, env_from={"HOTFIX_EXPECT_FINGERPRINT": EXPECT["valueFrom"]["fieldRef"]["fieldPath"]})
    lock = {"name": "HOTFIX_LOCK", "value": LOCK}
    assert env_problems({"env": [lock, EXPECT]}, overlay, "c") == []
    for wrong in ({"name": "HOTFIX_EXPECT_FINGERPRINT", "value": "hf1-0"},
                  {"name": "HOTFIX_EXPECT_FINGERPRINT", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, None):
        (problem,) = env_problems({"env": [lock] + ([wrong] if wrong else [])}, overlay, "c")
        assert problem == "c: HOTFIX_EXPECT_FINGERPRINT is not set from the pod's " + EXPECT["valueFrom"]["fieldRef"]["fieldPath"]


def test_mounts_into_the_host_s_site_packages_warn_with_the_question_to_ask_the_container(tmp_path, run_hotfix):
    """A lock exported from a host venv (its site-packages under /home or /tmp): the overlay is written, with
    compose's warning naming the workload's own container to ask; --container-site-packages silences it."""
    export = make_export(tmp_path / "export")
    lock = json.loads((export / "hotfix.lock").read_text())
    lock["site_packages"] = "/home/me/.venv/lib/python3.11/site-packages"
    (export / "hotfix.lock").write_text(json.dumps(lock))
    (tmp_path / "rendered.yaml").write_text(DEPLOYMENT)
    args = ("k8s", "--export-dir", export, "--base", tmp_path / "rendered.yaml", "--workload", "deployment/vllm",
            "--container", "vllm")
    done = run_hotfix(*args, "--to", tmp_path / "one")
    assert done.returncode == 0, done.stderr
    ask = """kubectl exec deployment/vllm -c vllm -- python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))'"""
    assert ("WARNING: the mounts go to /home/me/.venv/lib/python3.11/site-packages, the site-packages `hotfix export` "
            "recorded, but it is under a home or temporary directory" in done.stderr and f"`{ask}` prints" in done.stderr)
    quiet = run_hotfix(*args, "--to", tmp_path / "two", "--container-site-packages", SITE)
    assert quiet.returncode == 0 and "WARNING" not in quiet.stderr, quiet.stderr
