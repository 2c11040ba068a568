"""`hotfix k8s`: write a kustomize overlay mounting an export (files + hotfix.lock) into a workload.

The user's manifests are read, never written: a kustomization directory is referenced where it is;
a single manifest file (e.g. `helm template` output) is copied into the overlay, because kustomize
only loads files below the overlay's own directory.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Optional

from vllm_hotfix.containers import k8s
from vllm_hotfix.txn.lockfile import load_lock
from vllm_hotfix.errors import InvalidInput, Refused, UsageError, WriteFailed
from vllm_hotfix.output import emit_json, say

KUSTOMIZATIONS = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def run(*, export_dir: Path, out_dir: Path, base: Path, workload: Optional[str] = None, kind: Optional[str] = None,
        name: Optional[str] = None, containers=(), container_site_packages: Optional[str] = None,
        strict: bool = True, max_configmaps: int = k8s.MAX_CONFIGMAPS, as_json: bool = False) -> int:
    target = k8s.parse_workload(workload, kind, name)
    lock_path = export_dir / "hotfix.lock"
    lock = load_lock(lock_path)
    exported = {}
    for locked in lock.mounted_files():
        try:
            exported[locked.export] = (export_dir / locked.export).read_bytes()
        except OSError:
            raise InvalidInput(f"{export_dir / locked.export}: listed in {lock_path} but not readable",
                               hint="re-run `hotfix export` into this directory") from None
    _refuse_foreign(out_dir)
    resources, manifests, copies = _base(Path(base), out_dir)
    overlay = k8s.build(lock, exported, lock_path.read_bytes(), target, tuple(containers), resources=resources,
                        manifests=manifests, container_site_packages=container_site_packages, strict=strict,
                        max_configmaps=max_configmaps)
    _write(out_dir, {**overlay.files, **copies})
    if as_json:
        emit_json({"overlay": str(out_dir), "workload": f"{target.kind}/{target.name}", "patched": list(overlay.patched),
                   "configmaps": [{"name": cm.name, "bytes": cm.size, "keys": [i.key for i in cm.items]}
                                  for cm in overlay.configmaps]})
        return 0
    files = sum(len(cm.items) for cm in overlay.configmaps) - 1
    say(f"wrote {out_dir}/kustomization.yaml: {files} file(s) + hotfix.lock in {len(overlay.configmaps)} ConfigMap(s), "
        f"mounted read-only into {target.kind}/{target.name} ({', '.join(overlay.patched)})")
    say(f"next: kubectl kustomize {out_dir} | kubectl apply -f -   (or: kubectl apply -k {out_dir})")
    return 0


def _refuse_foreign(out_dir: Path) -> None:
    """--to may be an earlier overlay of ours (rewritten), or new / empty: never the user's manifests."""
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    existing = next((out_dir / k for k in KUSTOMIZATIONS if (out_dir / k).is_file()), None)
    text = existing.read_text(encoding="utf-8", errors="replace") if existing else ""
    if "- name: vllm-hotfix-0" not in text:
        raise Refused(f"{out_dir}: not empty and not an overlay written by `hotfix k8s`; nothing was written",
                      hint="pass --to a new directory (e.g. k8s/hotfix) beside your manifests")


def _base(base: Path, out_dir: Path) -> tuple[tuple[str, ...], list, dict[str, bytes]]:
    """(resources for the kustomization, the user's objects read, files to copy into the overlay)."""
    if base.is_dir():
        if not any((base / k).is_file() for k in KUSTOMIZATIONS):
            raise UsageError(f"{base}: a directory without kustomization.yaml",
                             hint="pass the manifest file itself, or a kustomization directory")
        docs = []
        for path in sorted([*base.glob("*.yaml"), *base.glob("*.yml")]):
            if path.name not in KUSTOMIZATIONS:
                docs += k8s.load_all(_read(path), source=str(path))
        relative = os.path.relpath(os.path.abspath(base), os.path.abspath(out_dir))
        return (relative,), docs, {}
    text = _read(base)
    docs = k8s.load_all(text, source=str(base))
    copy = f"base/{base.name}"
    return (copy,), docs, {copy: text.encode("utf-8")}


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: not found", hint="--base: the workload's manifest file or kustomization directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: cannot read: {exc}") from None


def _write(out_dir: Path, files: dict[str, bytes]) -> None:
    from vllm_hotfix.txn.atomic import atomic_write

    try:
        if (out_dir / "files").is_dir():  # files of an earlier export must not linger
            shutil.rmtree(out_dir / "files")
        for rel, data in files.items():
            path = out_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, data, 0o644)
    except OSError as exc:
        raise WriteFailed(f"{getattr(exc, 'filename', None) or out_dir}: cannot write the overlay: {exc.strerror}") from None
