"""A kustomize overlay that mounts exported hotfix files into a Kubernetes workload, read-only.

Pure: bytes and parsed manifests in, the overlay's files (name -> bytes) out; commands/k8s.py reads
and writes. The user's manifests are only read (to find the workload and its containers), never
edited: the overlay lists them as a resource and patches them on the way out of `kubectl kustomize`.

What the overlay holds:
- ``configMapGenerator`` entries ``<prefix>-0``, ``<prefix>-1``, ... carrying the patched files
  (keys ``NNN.<basename>``) and ``hotfix.lock``; split so that no ConfigMap's data passes the API
  server's 1 MiB limit (sum of key and value lengths). kustomize appends a content hash to each
  name, so a new export rolls the pods (subPath mounts never see in-place ConfigMap updates).
- for built-in kinds (Deployment, StatefulSet, DaemonSet, Job), a strategic-merge patch adding, to
  each named container, one ``readOnly`` ``subPath`` volumeMount per file over its site-packages path,
  the lock at /etc/vllm-hotfix/hotfix.lock, and the guard's ``HOTFIX_LOCK`` / ``HOTFIX_STRICT``; and
  the pod template's ``vllm-hotfix.io/fingerprint`` annotation (the lock's fingerprint in effect: what
  `hotfix k8s --admission`'s policy checks).
- for a LeaderWorkerSet (a CRD: kustomize merges its lists as JSON merge patch would, replacing the
  containers), the same additions as JSON 6902 operations addressed by index into
  ``leaderWorkerTemplate.leaderTemplate`` and ``.workerTemplate``, computed from the manifest read,
  plus a ``configurations`` file teaching kustomize where the ConfigMap names sit in that CRD.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from vllm_hotfix_guard.settings import CONTAINER_LOCK as LOCK_IN_CONTAINER, FINGERPRINT_ANNOTATION, LOCK_ENV, LOCK_NAME, STRICT_ENV
from vllm_hotfix_guard.txn.hotfix_lock import Lock
from vllm_hotfix_guard.txn.lock_check import expected_fingerprint
from vllm_hotfix.containers.k8s_trust import signature_items, trust_mount
from vllm_hotfix_guard.errors import InvalidInput, Refused, UsageError
from vllm_hotfix.containers import readiness as ready

CONFIGMAP_LIMIT = 1024 * 1024  # the API server's limit on a ConfigMap's data (keys + values)
MAX_CONFIGMAPS = 8  # beyond this, mounting from ConfigMaps is the wrong tool: bake an image
LOCK_KEY = LOCK_NAME
LWS = "LeaderWorkerSet"
LWS_TEMPLATES = ("leaderTemplate", "workerTemplate")
BUILTIN_KINDS = {
    "deployment": ("Deployment", "apps/v1"),
    "statefulset": ("StatefulSet", "apps/v1"),
    "daemonset": ("DaemonSet", "apps/v1"),
    "job": ("Job", "batch/v1"),
    "leaderworkerset": (LWS, "leaderworkerset.x-k8s.io/v1"),
}
WORKLOAD_HINT = "pass --workload KIND/NAME of the workload that runs vLLM, as the base names it"
BAKE_HINT = ("mount a hotfix bundle instead (`hotfix pack`, then `hotfix k8s --bundle REF@sha256:...`: an image volume, "
             "Kubernetes >= 1.33), or bake a derived image (`hotfix bake ID... --base IMAGE`)")


@dataclass(frozen=True)
class Workload:
    """A Deployment, StatefulSet or LeaderWorkerSet the overlay patches."""

    kind: str  # canonical, e.g. Deployment
    name: str
    api_version: str


@dataclass(frozen=True)
class Item:
    """One exported file as a ConfigMap key and its mount path."""

    key: str  # ConfigMap key
    source: str  # file in the overlay the generator reads
    size: int
    mount_path: Optional[str]  # None: the lock (mounted at LOCK_IN_CONTAINER)


@dataclass(frozen=True)
class ConfigMapPlan:
    """The ConfigMaps the exported files are split into (each under 1 MiB)."""

    name: str
    items: tuple[Item, ...]

    @property
    def size(self) -> int:
        return sum(len(i.key) + i.size for i in self.items)


@dataclass
class Overlay:
    """The kustomize overlay `hotfix k8s` writes: its files by name."""

    files: dict[str, bytes] = field(default_factory=dict)  # path in the overlay directory -> bytes
    configmaps: tuple[ConfigMapPlan, ...] = ()
    patched: tuple[str, ...] = ()  # "leaderTemplate/vllm" ... for messages
    mounts: dict[str, bytes] = field(default_factory=dict)  # mountPath -> the bytes a container must see there
    env: dict[str, str] = field(default_factory=dict)  # the guard's variables every patched container gets
    annotations: dict[str, str] = field(default_factory=dict)  # on every patched pod template
    # container name -> (its readinessProbe, what it does): the guard's, combined with the container's own if it
    # has one (readiness.combined); the leader's containers only, in a LeaderWorkerSet
    probes: dict[str, tuple[dict, str]] = field(default_factory=dict)
    env_from: dict[str, str] = field(default_factory=dict)  # variables set by the downward API: name -> fieldPath


def parse_workload(spec: Optional[str], kind: Optional[str], name: Optional[str]) -> Workload:
    """``deployment/vllm`` or --kind/--name, checked against the kinds the overlay knows."""
    if spec:
        kind, _, name = spec.partition("/")
    if not kind or not name:
        raise UsageError("name the workload: --workload KIND/NAME (e.g. deployment/vllm) or --kind and --name")
    known = BUILTIN_KINDS.get(kind.lower().replace("-", ""))
    if known is None:
        raise UsageError(f"unsupported workload kind {kind!r}",
                         hint=f"one of: {', '.join(k for k, _ in BUILTIN_KINDS.values())}")
    return Workload(known[0], name, known[1])


def config_key(index: int, path: str) -> str:
    base = re.sub(r"[^-._a-zA-Z0-9]", "_", path.rsplit("/", 1)[-1])
    return f"{index:03d}.{base}"[:253]


def plan_configmaps(items: list[Item], prefix: str, *, limit: int = CONFIGMAP_LIMIT,
                    max_configmaps: int = MAX_CONFIGMAPS) -> tuple[ConfigMapPlan, ...]:
    """Items packed in order into as few ConfigMaps as keep each at most ``limit`` bytes of data;
    Refused (naming `hotfix bake`) when one item alone passes it or more than ``max_configmaps`` are needed."""
    groups: list[list[Item]] = []
    used: list[int] = []
    for item in items:
        cost = len(item.key) + item.size
        if cost > limit:
            raise Refused(f"{item.key} ({item.size} bytes) does not fit in one ConfigMap ({limit} bytes of data at most)",
                          hint=BAKE_HINT)
        if groups and used[-1] + cost <= limit:
            groups[-1].append(item)
            used[-1] += cost
        else:
            groups.append([item])
            used.append(cost)
    if len(groups) > max_configmaps:
        raise Refused(f"the files need {len(groups)} ConfigMaps of {limit} bytes; more than {max_configmaps} is not "
                      f"a sane way to ship code", hint=BAKE_HINT)
    return tuple(ConfigMapPlan(f"{prefix}-{i}", tuple(g)) for i, g in enumerate(groups))


def build(lock: Lock, exported: dict[str, bytes], lock_bytes: bytes, workload: Workload, containers: tuple[str, ...],
          *, resources: tuple[str, ...], manifests: Iterable[dict], container_site_packages: Optional[str] = None,
          strict: bool = True, prefix: str = "vllm-hotfix", limit: int = CONFIGMAP_LIMIT,
          max_configmaps: int = MAX_CONFIGMAPS, image=None, guard: Optional[dict[str, bytes]] = None,
          readiness: bool = True, python: str = ready.IMAGE_PYTHON, signatures=(),
          trust_configmap: Optional[str] = None) -> Overlay:
    """The overlay's files. ``exported``: export path -> bytes of every locked file; ``manifests``: the
    user's parsed objects (searched for the workload); ``resources``: what kustomization lists; ``image``:
    a containers.k8s_image_volume.ImageVolume mounted instead of ConfigMaps (``exported`` unused); ``signatures``: the
    lock's signature files (containers/k8s_trust.signature_items); ``trust_configmap``: k8s_trust.trust_mount."""
    if not containers:
        raise UsageError("name the container(s) to patch: --container NAME (repeatable)")
    site = (container_site_packages or lock.site_packages).rstrip("/")
    if not site.startswith("/"):
        raise UsageError(f"container site-packages must be an absolute path, got {site!r}")
    if image is not None:  # a hotfix bundle as an image volume (containers/k8s_image_volume.py)
        files, configmaps, mounts, volumes = {}, (), image.mounts(site), image.volumes()
    else:
        files, configmaps = configmap_files(lock, exported, lock_bytes, site, prefix, limit, max_configmaps, guard, signatures)
        mounts = [{"name": cm.name, "mountPath": item.mount_path or LOCK_IN_CONTAINER, "subPath": item.key,
                   "readOnly": True} for cm in configmaps for item in cm.items]
        volumes = [{"name": cm.name, "configMap": {"name": cm.name}} for cm in configmaps]
    env = [{"name": LOCK_ENV, "value": LOCK_IN_CONTAINER}, {"name": STRICT_ENV, "value": "1" if strict else "0"}]
    trust_mount(trust_configmap, [cm.name for cm in configmaps], prefix, mounts, volumes, env)
    annotations = {FINGERPRINT_ANNOTATION: expected_fingerprint(lock)}
    probe = ready.k8s_parts(mounts, volumes, env, python) if readiness else None
    env.append(ready.expect_fingerprint_env())  # `ready` checks the mounted lock is the one the pod is annotated with

    manifests = list(manifests)
    found = find(manifests, workload)
    if found is None:
        raise Refused(f"{workload.kind.lower()}/{workload.name} is not in the manifests given; nothing was written"
                      f" ({contents(manifests)})", hint=WORKLOAD_HINT)
    kustomization: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": list(resources),
        **({"configMapGenerator": [{"name": cm.name, "files": [f"{i.key}={i.source}" for i in cm.items]}
                                   for cm in configmaps]} if configmaps else {}),
    }
    target = {"kind": workload.kind, "name": workload.name}
    if workload.kind == LWS:
        ops, patched = lws_operations(found, containers, mounts, volumes, env, annotations)
        probe_ops, probes = ready.lws_probe(found, containers, probe)
        ops += probe_ops
        files["lws-patch.yaml"] = dump([ops])
        files["kustomizeconfig.yaml"] = dump([lws_name_references()])
        kustomization["configurations"] = ["kustomizeconfig.yaml"]
        kustomization["patches"] = [{"path": "lws-patch.yaml", "target": target}]
    else:
        patched = check_containers(found, workload, containers)
        probes = ready.container_probes(((found.get("spec") or {}).get("template") or {}).get("spec") or {},
                                        tuple(patched), probe)
        patch = {"apiVersion": workload.api_version, "kind": workload.kind, "metadata": {"name": workload.name},
                 "spec": {"template": {"metadata": {"annotations": annotations}, "spec": {
                     "containers": [{"name": c, "env": env, "volumeMounts": mounts, **ready.probed(probes.get(c, (None,))[0])}
                                    for c in patched],
                     "volumes": volumes}}}}
        files["hotfix-patch.yaml"] = dump([patch])
        kustomization["patches"] = [{"path": "hotfix-patch.yaml", "target": target}]
    files["kustomization.yaml"] = dump([kustomization])
    expected = image.expected(site) if image is not None else \
        {item.mount_path or LOCK_IN_CONTAINER: files[item.source] for cm in configmaps for item in cm.items}
    return Overlay(files, configmaps, tuple(patched), expected, {e["name"]: e["value"] for e in env if "value" in e},
                   annotations, probes, {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in env if "valueFrom" in e})


def env_problems(container: dict, overlay: Overlay, label: str) -> list[str]:
    """What the rendered ``container`` lacks of the overlay's variables (values, and downward-API fields)."""
    found = {e.get("name"): e for e in container.get("env") or ()}
    problems = [f"{label}: {key} is {(found.get(key) or {}).get('value')!r}, not {value!r}"
                for key, value in overlay.env.items() if (found.get(key) or {}).get("value") != value]
    for key, path in overlay.env_from.items():
        ref = ((found.get(key) or {}).get("valueFrom") or {}).get("fieldRef") or {}
        if ref.get("fieldPath") != path or "value" in (found.get(key) or {}):
            problems.append(f"{label}: {key} is not set from the pod's {path}")
    return problems


def configmap_files(lock: Lock, exported: dict[str, bytes], lock_bytes: bytes, site: str, prefix: str, limit: int,
                    max_configmaps: int, guard: Optional[dict[str, bytes]] = None, signatures=()) -> tuple[dict, tuple[ConfigMapPlan, ...]]:
    """The files the ConfigMaps are generated from (overlay path -> bytes), and the ConfigMaps; ``guard``: the
    export's guard tree (path in site-packages -> bytes), mounted file by file beside the patched files."""
    items, files = [], {}
    for index, locked in enumerate(lock.mounted_files()):  # one per path: the top of its series
        data = exported.get(locked.export)
        if data is None:
            raise InvalidInput(f"the export has no file {locked.export} (listed in hotfix.lock)",
                               hint="re-run `hotfix export` into this directory")
        source = f"files/{locked.path}"
        files[source] = data
        items.append(Item(config_key(index, locked.path), source, len(data), f"{site}/{locked.path}"))
    for index, (path, data) in enumerate(sorted((guard or {}).items()), start=len(items)):  # the guard's tree
        files[f"guard/{path}"] = data
        items.append(Item(config_key(index, path), f"guard/{path}", len(data), f"{site}/{path}"))
    files[LOCK_KEY] = lock_bytes
    items.insert(0, Item(LOCK_KEY, LOCK_KEY, len(lock_bytes), None))
    items[1:1] = [Item(*fields) for fields in signature_items(signatures, files)]
    return files, plan_configmaps(items, prefix, limit=limit, max_configmaps=max_configmaps)


def find(manifests: Iterable[dict], workload: Workload) -> Optional[dict]:
    for doc in manifests:
        if isinstance(doc, dict) and doc.get("kind") == workload.kind \
                and (doc.get("metadata") or {}).get("name") == workload.name:
            return doc
    return None


def _container_names(pod_spec: dict) -> list[str]:
    return [c.get("name") for c in (pod_spec or {}).get("containers") or ()]


def contents(manifests: Iterable[dict], limit: int = 12) -> str:
    """'it contains Deployment/vllm, Service/vllm-engine' -- what a base holds, for a refusal."""
    names = [f"{d.get('kind')}/{(d.get('metadata') or {}).get('name')}" for d in manifests if isinstance(d, dict)]
    if not names:
        return "it contains no Kubernetes object"
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return "it contains " + ", ".join(names[:limit]) + more


def check_containers(found: dict, workload: Workload, containers: tuple[str, ...]) -> list[str]:
    """The named containers, checked against the workload's pod template (Refused: one is not there)."""
    names = _container_names(((found.get("spec") or {}).get("template") or {}).get("spec") or {})
    missing = [c for c in containers if c not in names]
    if missing:
        raise Refused(f"{workload.kind}/{workload.name} has no container {', '.join(missing)}; nothing was written",
                      hint=f"its containers: {', '.join(map(str, names)) or '(none)'}")
    return list(containers)


def lws_operations(found: dict, containers: tuple[str, ...], mounts: list, volumes: list, env: list,
                   annotations: dict) -> tuple[list, list]:
    """JSON 6902 operations adding mounts, volumes and env to the named containers of both templates,
    and the annotations to both templates."""
    lwt = (found.get("spec") or {}).get("leaderWorkerTemplate") or {}
    ops: list[dict] = []
    patched: list[str] = []
    for template in LWS_TEMPLATES:
        if template not in lwt:  # no leaderTemplate: the leader runs the workerTemplate
            continue
        base = f"/spec/leaderWorkerTemplate/{template}/spec"
        pod = (lwt[template] or {}).get("spec") or {}
        names = _container_names(pod)
        chosen = [i for i, n in enumerate(names) if n in containers]
        if not chosen:
            raise Refused(f"the LeaderWorkerSet's {template} has none of the containers {', '.join(containers)}; "
                          "nothing was written",
                          hint=f"its containers: {', '.join(map(str, names)) or '(none)'}; every node must carry the hotfix")
        for i in chosen:
            container = pod["containers"][i]
            ops += _append(f"{base}/containers/{i}/volumeMounts", container.get("volumeMounts"), mounts)
            ops += _set_env(f"{base}/containers/{i}/env", container.get("env"), env)
            patched.append(f"{template}/{names[i]}")
        ops += _append(f"{base}/volumes", pod.get("volumes"), volumes)
        ops += _annotate(f"/spec/leaderWorkerTemplate/{template}/metadata", (lwt[template] or {}).get("metadata"), annotations)
    if not patched:
        raise Refused("the LeaderWorkerSet has no leaderWorkerTemplate.workerTemplate; nothing was written")
    unused = [c for c in containers if not any(p.endswith(f"/{c}") for p in patched)]
    if unused:
        raise Refused(f"the LeaderWorkerSet has no container {', '.join(unused)}; nothing was written",
                      hint="name the containers of its leaderTemplate and workerTemplate")
    return ops, patched


def _append(path: str, existing: Optional[list], values: list) -> list[dict]:
    if existing is None:
        return [{"op": "add", "path": path, "value": values}]
    return [{"op": "add", "path": f"{path}/-", "value": v} for v in values]


def _annotate(path: str, metadata: Optional[dict], annotations: dict) -> list[dict]:
    if metadata is None:
        return [{"op": "add", "path": path, "value": {"annotations": annotations}}]
    if metadata.get("annotations") is None:
        return [{"op": "add", "path": f"{path}/annotations", "value": annotations}]
    return [{"op": "add", "path": f"{path}/annotations/{k.replace('~', '~0').replace('/', '~1')}", "value": v}
            for k, v in annotations.items()]


def _set_env(path: str, existing: Optional[list], values: list) -> list[dict]:
    if existing is None:
        return [{"op": "add", "path": path, "value": values}]
    index = {e.get("name"): i for i, e in enumerate(existing)}
    return [{"op": "replace", "path": f"{path}/{index[v['name']]}", "value": v} if v["name"] in index
            else {"op": "add", "path": f"{path}/-", "value": v} for v in values]


def lws_name_references() -> dict:
    """kustomize configuration: where a LeaderWorkerSet names ConfigMaps (so the hash suffix follows)."""
    return {"nameReference": [{"kind": "ConfigMap", "version": "v1", "fieldSpecs": [
        {"kind": LWS, "path": f"spec/leaderWorkerTemplate/{t}/spec/volumes/configMap/name"} for t in LWS_TEMPLATES]}]}


def pod_templates(obj: dict) -> list[tuple[str, dict]]:
    """(where, PodTemplateSpec) of a rendered workload; for a LeaderWorkerSet both templates."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == LWS:
        lwt = spec.get("leaderWorkerTemplate") or {}
        return [(t, lwt[t]) for t in LWS_TEMPLATES if t in lwt]
    return [("template", spec["template"])] if "template" in spec else []


YAML_WIDTH = 1 << 30  # no scalar is folded: a path stays on its key's line (ruamel folds at 80 by default)


def dump(docs: list, *, width: int = YAML_WIDTH) -> bytes:
    """YAML of ``docs``, keys in their order, every scalar on its key's line (the one dumper of every YAML
    file the tool writes)."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = width
    yaml.sort_base_mapping_type_on_output = False
    out = io.StringIO()
    yaml.dump_all(docs, out)
    return out.getvalue().encode("utf-8")


def load_all(text: str, *, source: str) -> list:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    from vllm_hotfix.containers.yamledit import check_aliases

    yaml = YAML(typ="safe", pure=True)
    try:
        nodes = list(yaml.compose_all(text))
        for node in nodes:  # refused while loading, before any alias is expanded into objects
            check_aliases(node, source)
        return [d for d in (yaml.constructor.construct_document(node) for node in nodes) if d is not None]
    except YAMLError as exc:
        raise InvalidInput(f"{source}: not YAML: {exc}".splitlines()[0]) from None
