"""A hotfix bundle (the OCI image `hotfix pack` writes) mounted into a workload as a Kubernetes image
volume (KEP-4639), pinned by digest: the part of `hotfix k8s --bundle REF@sha256:...` that is pure.

containers/k8s.build assembles the overlay as for ConfigMaps, with ``ImageVolume.volumes`` and
``ImageVolume.mounts`` in place of the ConfigMaps' (no configMapGenerator): one volume
``vllm-hotfix-bundle`` whose ``image.reference`` is ``NAME@sha256:<64 hex>`` (``pullPolicy:
IfNotPresent``: a digest never changes, so a node that has it need not ask the registry again), and,
in each patched container, one read-only ``subPath`` mount per file:

    <site-packages>/<path>               <- site-packages/<path>     (each locked file)
    /etc/vllm-hotfix/hotfix.lock         <- hotfix.lock
    /etc/vllm-hotfix/hotfix.lock.*.minisig <- the same name          (the lock's signature files)
    <site-packages>/<path>               <- guard/<path>           (the guard's distribution, when packed)

A tag (which can move) or a digest that is not sha256 and 64 hex digits is refused (UsageError, exit 2).
``check_render`` checks what `kubectl kustomize` renders against that. Where it works: Kubernetes
>= 1.33 (subPath of an image volume; beta, on by default from 1.35) and a runtime that mounts images
(containerd 2.1 or later, CRI-O): ``REQUIREMENTS``, said by the command and in docs/bundles.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from vllm_hotfix.containers.bundle import GUARD_DIR
from vllm_hotfix_guard.core.docfields import is_hex64
from vllm_hotfix_guard.errors import UsageError
from vllm_hotfix_guard.settings import CONTAINER_LOCK, LOCK_NAME
from vllm_hotfix_guard.txn.hotfix_lock import Lock

VOLUME = "vllm-hotfix-bundle"
PULL_POLICY = "IfNotPresent"
LOCK_DIR = CONTAINER_LOCK.rpartition("/")[0]  # the lock's signature files are mounted beside it
REQUIREMENTS = ("an image volume needs Kubernetes >= 1.33 (subPath mounts of image volumes; beta, on by default "
                "from 1.35, the ImageVolume feature gate in 1.33-1.34) and a container runtime that mounts images "
                "(containerd 2.1 or later, CRI-O); otherwise build an image with `hotfix bake`")
REFERENCE_HINT = "name the bundle by the digest `hotfix pack` printed: REGISTRY/PATH@sha256:<64 hex digits>"


@dataclass(frozen=True, slots=True, kw_only=True)
class Reference:
    """An image reference pinned by digest, without a tag."""

    name: str  # REGISTRY/PATH
    digest: str  # sha256 hex

    def __str__(self) -> str:
        return f"{self.name}@sha256:{self.digest}"


def parse_reference(text: str) -> Reference:
    """``NAME@sha256:<64 hex>``: a tag alone, a tag beside the digest, another algorithm or a digest
    that is not 64 lowercase hex digits is a UsageError naming what is wrong."""
    name, at, digest = text.rpartition("@")
    shown = repr(text)
    if not at:
        raise UsageError(f"--bundle {shown}: not pinned by digest (a tag can move: the pods would run "
                         "whatever it names when they start)", hint=REFERENCE_HINT)
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or not is_hex64(hexdigest):
        raise UsageError(f"--bundle {shown}: the digest must be sha256: and 64 lowercase hex digits", hint=REFERENCE_HINT)
    if not name or not name.isascii() or not name.isprintable() or any(c.isspace() or c == "@" for c in name) \
            or name.startswith("/") or name.endswith("/") or "//" in name or name != name.lower():
        raise UsageError(f"--bundle {shown}: not an image repository before the digest", hint=REFERENCE_HINT)
    if ":" in name.rsplit("/", 1)[-1]:
        raise UsageError(f"--bundle {shown}: a tag beside the digest; mount by digest only",
                         hint=f"drop the tag: {name.rsplit(':', 1)[0]}@sha256:{hexdigest}")
    return Reference(name=name, digest=hexdigest)


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageVolume:
    """The bundle as the pod sees it: its reference, and what it holds (each member's bytes)."""

    reference: Reference
    lock: Lock  # parsed from lock_bytes
    files: dict  # site-packages-relative path -> bytes (the lock's mounted files)
    lock_bytes: bytes
    beside_lock: dict  # signature file name -> bytes (members at the image's top, beside hotfix.lock)
    source: str  # where the file list came from, for people: "the bundle DIR" or "the export DIR"
    guard: Optional[dict] = None  # the guard's files (site-packages-relative path -> bytes); None: none packed

    def volumes(self) -> list[dict]:
        return [{"name": VOLUME, "image": {"reference": str(self.reference), "pullPolicy": PULL_POLICY}}]

    def members(self, site: str) -> dict:
        """mountPath -> (subPath in the image, the bytes found there)."""
        found = {f"{site}/{path}": (f"site-packages/{path}", data) for path, data in self.files.items()}
        found[CONTAINER_LOCK] = (LOCK_NAME, self.lock_bytes)
        found.update({f"{LOCK_DIR}/{name}": (name, data) for name, data in sorted(self.beside_lock.items())})
        found.update({f"{site}/{path}": (f"{GUARD_DIR}/{path}", data) for path, data in sorted((self.guard or {}).items())})
        return found

    def mounts(self, site: str) -> list[dict]:
        return [{"name": VOLUME, "mountPath": path, "subPath": sub, "readOnly": True}
                for path, (sub, _) in self.members(site).items()]

    def to_json(self) -> dict:
        return {"reference": str(self.reference), "files": len(self.files), "signatures": sorted(self.beside_lock),
                "guard": len(self.guard or ()), "from": self.source, "requires": REQUIREMENTS}

    def expected(self, site: str) -> dict:
        """mountPath -> the bytes a container sees there (containers.k8s_overlay.Overlay.mounts)."""
        return {path: data for path, (_, data) in self.members(site).items()}


def image_volume(reference: Reference, content, *, source: str) -> ImageVolume:
    """The image volume of a bundle's ``content`` (containers.bundle.Content: read back from the layout,
    or made from the export it was packed from)."""
    from vllm_hotfix_guard.core.minisign import is_signature_name

    beside = {e.path: e.data for e in content.extra if "/" not in e.path and is_signature_name(e.path, LOCK_NAME)}
    return ImageVolume(reference=reference, lock=content.lock, files=dict(content.files), lock_bytes=content.lock_bytes,
                       beside_lock=beside, source=source, guard=content.guard)


def check_render(objects: list, workload, overlay, image: ImageVolume, site: str) -> list[str]:
    """What the rendered overlay lacks: each patched container must mount every member read-only, by its
    subPath, from a volume whose image is this reference (pulled IfNotPresent), and carry the guard's
    variables; each patched pod template the annotations. Empty: the render is what was meant."""
    from vllm_hotfix.containers.k8s_overlay import env_problems, find, pod_templates

    found = find(objects, workload)
    if found is None:
        return [f"the render has no {workload.kind}/{workload.name}"]
    templates = dict(pod_templates(found))
    wanted = {"reference": str(image.reference), "pullPolicy": PULL_POLICY}
    problems: list[str] = []
    for patched in overlay.patched:
        where, _, name = patched.rpartition("/")
        template = templates.get(where or "template") or {}
        label = f"{workload.kind}/{workload.name} {patched if where else 'container ' + name}"
        notes = (template.get("metadata") or {}).get("annotations") or {}
        problems += [f"{label}: annotation {key} is {notes.get(key)!r}, not {value!r}"
                     for key, value in overlay.annotations.items() if notes.get(key) != value]
        pod = template.get("spec") or {}
        images = {v.get("name"): v.get("image") for v in pod.get("volumes") or () if "image" in v}
        container = next((c for c in pod.get("containers") or () if c.get("name") == name), None)
        if container is None:
            problems.append(f"{label}: not in the render")
            continue
        by_path = {m.get("mountPath"): m for m in container.get("volumeMounts") or ()}
        for path, (sub, _) in image.members(site).items():
            mount = by_path.get(path) or {}
            if images.get(mount.get("name")) != wanted or mount.get("subPath") != sub or mount.get("readOnly") is not True:
                problems.append(f"{label}: {path} is not a read-only mount of {sub} from image volume {image.reference}")
        problems += env_problems(container, overlay, label)
    return problems


def site_packages(lock: Lock, given: Optional[str]) -> str:
    """Where the files go in the container: --container-site-packages, else the lock's (as k8s.build)."""
    return (given or lock.site_packages).rstrip("/")
