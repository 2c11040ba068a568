"""`hotfix export`: patched files computed from a pristine install, plus hotfix.lock, for bind mounts.

Nothing in the install is changed: the patch is planned (pure core) against the installed files after
they were proven pristine against pip's RECORD, and only the planned results are written to DIR.
"""

from __future__ import annotations

from pathlib import Path

from vllm_hotfix import __version__, lockfile
from vllm_hotfix.errors import FixedUpstream, Refused, WriteFailed
from vllm_hotfix.output import emit_json, say

LOCK_NAME = "hotfix.lock"


def run(*, hotfix_ids, out_dir: Path, python: str | None = None, catalogs=(), as_json: bool = False, **_ignored) -> int:
    from vllm_hotfix.catalog.index import Catalog, parse_ref

    catalog = Catalog.load(catalogs)
    manifests = [catalog.get(*parse_ref(ref)) for ref in hotfix_ids]
    targets: dict[str, object] = {}
    locked: list[lockfile.LockedHotfix] = []
    outputs: dict[str, bytes] = {}
    owner_of: dict[str, str] = {}
    for manifest in manifests:
        hotfix, files = _export_one(manifest, python, targets)
        for locked_file in hotfix.files:
            if locked_file.path in owner_of:
                raise Refused(
                    f"{owner_of[locked_file.path]} and {hotfix.id} both change {locked_file.path}; one bind mount cannot carry both",
                    hint="export them separately, or make one hotfix that contains both changes",
                )
            owner_of[locked_file.path] = hotfix.id
        locked.append(hotfix)
        outputs.update(files)

    site_packages = str(next(iter(targets.values())).root)
    lock_path = out_dir / LOCK_NAME
    lock = lockfile.Lock(site_packages=site_packages, hotfixes=_merge(lock_path, site_packages, locked),
                         generator=f"vllm-hotfix {__version__}")
    _write(out_dir, outputs, lockfile.dump_lock(lock))

    if as_json:
        emit_json({
            "to": str(out_dir), "lock": str(lock_path), "site_packages": site_packages,
            "hotfixes": [{"id": h.id, "version": h.version, "baseline_version": h.baseline_version,
                          "files": [{"path": f.path, "export": f.export, "sha256": f.sha256} for f in h.files]}
                         for h in locked],
        })
        return 0
    for hotfix in locked:
        say(f"exported {hotfix.id}@{hotfix.version} (from pristine {hotfix.distribution} {hotfix.baseline_version}):")
        for f in hotfix.files:
            say(f"  {out_dir / f.export}")
    say(f"wrote {lock_path} (site-packages {site_packages})")
    say(f"next: hotfix compose {' '.join(h.id for h in locked)} --service SERVICE --export-dir {out_dir}")
    return 0


def _export_one(manifest, python: str | None, targets: dict) -> tuple[lockfile.LockedHotfix, dict[str, bytes]]:
    from vllm_hotfix.core.apply import plan_patch
    from vllm_hotfix.flow.operations import catalog_hotfix, prove_files_pristine, sha256
    from vllm_hotfix.install.locate import locate_package
    from vllm_hotfix.install.tree import Tree

    spec = manifest.targets[0]
    if spec.package not in targets:
        targets[spec.package] = locate_package(spec.package, python=python)
    target = targets[spec.package]
    version = target.version
    where = f"{spec.distribution} {version} at {target.package_dir}"
    if manifest.is_fixed_in(version):
        raise FixedUpstream(
            f"{manifest.id}: {where} already contains the fix ({manifest.fixed_in.describe()}); nothing to export",
            hint="drop any bind mount of this hotfix from the compose file (`hotfix compose ID --remove`)",
        )
    if version is None or not spec.contains(version):
        raise Refused(f"{manifest.id}: {where} is outside the hotfix's range {spec.versions}")
    if target.kind != "wheel" or target.dist_info is None:
        raise Refused(f"{manifest.id}: {where} is a {target.kind} install; export needs a pip-installed wheel "
                      f"whose RECORD proves the baseline", hint="run export against a pristine wheel install of the same version")

    for patch_spec in manifest.patches_for(version):
        if patch_spec.kind != "file":
            raise Refused(f"{manifest.id}: patch {patch_spec.label} is a {patch_spec.kind} patch; export supports "
                          f"catalog patch files", hint="apply it in the image with `hotfix apply` instead")
    series = catalog_hotfix(manifest, target).series
    prove_files_pristine(target, spec, {path for f in series.files for path in (f.old_path, f.new_path) if path})

    changed: dict[str, bytes] = {}
    baseline: dict[str, bytes | None] = {}
    for edit in plan_patch(series, Tree(target.root).read).edits:
        if edit.action not in ("modify", "create") or edit.after is None:
            raise Refused(f"{manifest.id}: {edit.path} is {edit.action}d by the patch; only modified or created "
                          f"files can be bind-mounted", hint="apply this hotfix in the image instead (`hotfix apply`)")
        baseline[edit.path] = edit.before
        changed[edit.path] = edit.after

    files, outputs = [], {}
    for path in sorted(changed):
        data = changed[path]
        export = f"{manifest.id}/{path}"
        files.append(lockfile.LockedFile(path, sha256(data), sha256(baseline[path]), export))
        outputs[export] = data
    fixed_in = manifest.fixed_in.version if manifest.fixed_in else None
    hotfix = lockfile.LockedHotfix(manifest.id, manifest.version, spec.distribution, spec.package,
                                   str(version), fixed_in, tuple(files))
    return hotfix, outputs


def _merge(lock_path: Path, site_packages: str, exported: list[lockfile.LockedHotfix]) -> tuple:
    """Keep hotfixes exported earlier into the same directory (same site-packages) beside the new ones."""
    if not lock_path.exists():
        return tuple(exported)
    previous = lockfile.load_lock(lock_path)
    if previous.site_packages != site_packages:
        raise Refused(f"{lock_path} was exported for site-packages {previous.site_packages}, not {site_packages}",
                      hint="export into a new directory")
    ids = {h.id for h in exported}
    return tuple(h for h in previous.hotfixes if h.id not in ids) + tuple(exported)


def _write(out_dir: Path, outputs: dict[str, bytes], lock_bytes: bytes) -> None:
    from vllm_hotfix.install.tree import Tree
    from vllm_hotfix.txn.atomic import atomic_write

    tree = Tree(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for export, data in outputs.items():
            path = tree.path(export)
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, data, 0o644)
        atomic_write(out_dir / LOCK_NAME, lock_bytes, 0o644)
    except OSError as exc:
        raise WriteFailed(f"{getattr(exc, 'filename', None) or out_dir}: cannot write the export: {exc.strerror}",
                          hint="the install was not touched; fix the directory and rerun") from None
