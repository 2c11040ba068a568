"""What `kubectl kustomize` renders of a ConfigMap overlay, checked against what `hotfix k8s` meant
(containers/k8s_overlay.build): pure, on the parsed render."""

from __future__ import annotations

from vllm_hotfix.containers.k8s_overlay import Overlay, Workload, env_problems, find, pod_templates


def check_render(objects: list, workload: Workload, overlay: Overlay) -> list[str]:
    """What the rendered overlay (``kubectl kustomize`` output, parsed) lacks: every patched container of
    the workload must mount every file read-only from a rendered ConfigMap holding exactly the exported
    bytes, and carry the guard's variables. An empty list: the render is what `hotfix k8s` meant."""
    import base64

    found = find(objects, workload)
    if found is None:
        return [f"the render has no {workload.kind}/{workload.name}"]
    configmaps = {(o.get("metadata") or {}).get("name"): o for o in objects
                  if isinstance(o, dict) and o.get("kind") == "ConfigMap"}
    templates = dict(pod_templates(found))
    problems = []
    for patched in overlay.patched:
        where, _, name = patched.rpartition("/")
        template = templates.get(where or "template") or {}
        pod = template.get("spec") or {}
        annotated = (template.get("metadata") or {}).get("annotations") or {}
        problems += [f"{workload.kind}/{workload.name} {where or 'template'}: annotation {k} is {annotated.get(k)!r}, "
                     f"not {v!r}" for k, v in overlay.annotations.items() if annotated.get(k) != v]
        container = next((c for c in pod.get("containers") or () if c.get("name") == name), None)
        label = f"{workload.kind}/{workload.name} {patched if where else 'container ' + name}"
        if container is None:
            problems.append(f"{label}: not in the render")
            continue
        volumes = {v.get("name"): (v.get("configMap") or {}).get("name") for v in pod.get("volumes") or ()}
        mounts = {m.get("mountPath"): m for m in container.get("volumeMounts") or ()}
        for path, data in overlay.mounts.items():
            mount = mounts.get(path)
            if mount is None:
                problems.append(f"{label}: no mount at {path}")
                continue
            cm = configmaps.get(volumes.get(mount.get("name")))
            if cm is None or mount.get("readOnly") is not True or not mount.get("subPath"):
                problems.append(f"{label}: {path} is not a read-only subPath mount of a rendered ConfigMap")
                continue
            key = mount["subPath"]
            text = (cm.get("data") or {}).get(key)
            binary = (cm.get("binaryData") or {}).get(key)
            held = text.encode("utf-8") if isinstance(text, str) else base64.b64decode(binary) if binary else None
            if held != data:
                problems.append(f"{label}: {path} would not hold the exported bytes (ConfigMap "
                                f"{cm['metadata']['name']} key {key})")
        probe, what = overlay.probes.get(name, (None, "")) if where != "workerTemplate" else (None, "")
        if probe is not None and container.get("readinessProbe") != probe:
            problems.append(f"{label}: readinessProbe is not {what}")
        problems += env_problems(container, overlay, label)
    return problems
