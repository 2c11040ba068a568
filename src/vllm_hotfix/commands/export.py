"""`hotfix export`: patched files computed from a pristine install, plus hotfix.lock, for bind mounts.

Nothing in the install is changed: the patch is planned (pure core) against the installed files after
they were proven pristine against pip's RECORD, and only the planned results are written to DIR.
"""

from __future__ import annotations

from pathlib import Path

from vllm_hotfix import __version__
from vllm_hotfix.containers import lockfile
from vllm_hotfix.errors import FixedUpstream, Refused, WriteFailed
from vllm_hotfix.output import emit_json, quote_path, say

LOCK_NAME = "hotfix.lock"


def run(*, hotfix_ids, out_dir: Path, python: str | None = None, catalogs=(), dry_run: bool = False,
        as_json: bool = False) -> int:
    from vllm_hotfix.catalog.index import Catalog, parse_ref

    catalog = Catalog.load(catalogs)
    manifests = [catalog.get(*parse_ref(ref)) for ref in hotfix_ids]
    from vllm_hotfix.flow.resolve import Resolver

    resolver = Resolver(python)
    targets: dict[str, object] = {}
    locked: list[lockfile.LockedHotfix] = []
    outputs: dict[str, bytes] = {}
    owner_of: dict[str, str] = {}
    for manifest in manifests:
        hotfix, files = _export_one(manifest, resolver, targets)
        for locked_file in hotfix.files:
            if locked_file.path in owner_of:
                raise Refused(
                    f"{owner_of[locked_file.path]} and {hotfix.id} both change {quote_path(locked_file.path)}; "
                    f"one bind mount cannot carry both",
                    hint="export them separately, or make one hotfix that contains both changes",
                )
            owner_of[locked_file.path] = hotfix.id
        locked.append(hotfix)
        outputs.update(files)

    site_packages = str(next(iter(targets.values())).root)
    lock_path = out_dir / LOCK_NAME
    lock = lockfile.Lock(site_packages=site_packages, hotfixes=_merge(lock_path, site_packages, locked),
                         generator=f"vllm-hotfix {__version__}")
    if not dry_run:
        _write(out_dir, outputs, lockfile.dump_lock(lock))

    if as_json:
        emit_json({
            "to": str(out_dir), "dry_run": dry_run, "lock": str(lock_path), "site_packages": site_packages,
            "hotfixes": [{"id": h.id, "version": h.version, "baseline_version": h.baseline_version,
                          "files": [{"path": f.path, "export": f.export, "sha256": f.sha256} for f in h.files]}
                         for h in locked],
        })
        return 0
    if dry_run:
        for hotfix in locked:
            say(f"would export {hotfix.id}@{hotfix.version} (from pristine {hotfix.distribution} {hotfix.baseline_version}):")
            for f in hotfix.files:
                say(f"  {out_dir / f.export}")
        say(f"dry run: would write {lock_path}; nothing was written")
        return 0
    for hotfix in locked:
        say(f"exported {hotfix.id}@{hotfix.version} (from pristine {hotfix.distribution} {hotfix.baseline_version}):")
        for f in hotfix.files:
            say(f"  {out_dir / f.export}")
    say(f"wrote {lock_path} (site-packages {site_packages})")
    say(f"next: hotfix compose {' '.join(h.id for h in locked)} --service SERVICE --export-dir {out_dir}")
    return 0


def _export_one(manifest, resolver, targets: dict) -> tuple[lockfile.LockedHotfix, dict[str, bytes]]:
    from vllm_hotfix.core.apply import plan_patch
    from vllm_hotfix.flow.applicability import check_applicable
    from vllm_hotfix.flow.hotfix import catalog_hotfix, sha256
    from vllm_hotfix.flow.plan import prove_files_pristine
    from vllm_hotfix.install.tree import Tree

    target, spec = resolver.for_manifest(manifest)  # the same resolution and applicability as `hotfix apply`
    try:
        check_applicable(manifest, spec, target)
    except FixedUpstream as exc:
        raise FixedUpstream(exc.message, hint="drop any bind mount of this hotfix from the compose file "
                                              f"(`hotfix compose {manifest.id} --remove`)") from None
    targets[target.package] = target
    version = target.version
    where = f"{spec.distribution} {version} at {target.package_dir}"
    if target.kind != "wheel" or target.dist_info is None:
        raise Refused(f"{manifest.id}: {where} is a {target.kind} install; export needs a pip-installed wheel "
                      f"whose RECORD proves the baseline", hint="run export against a pristine wheel install of the same version")

    for patch_spec in manifest.patches_for(version):
        if patch_spec.kind != "file":
            raise Refused(f"{manifest.id}: patch {patch_spec.label} is a {patch_spec.kind} patch; export supports "
                          f"catalog patch files", hint="apply it in the image with `hotfix apply` instead")
    series = catalog_hotfix(manifest, target).series
    read = _recorded_baseline(manifest.id, target)
    if read is None:  # not applied here: the installed files are the baseline, proven against RECORD
        prove_files_pristine(target, spec, {path for f in series.files for path in (f.old_path, f.new_path) if path})
        read = Tree(target.root).read

    changed: dict[str, bytes] = {}
    baseline: dict[str, bytes | None] = {}
    for edit in plan_patch(series, read).edits:
        if edit.action not in ("modify", "create") or edit.after is None:
            raise Refused(f"{manifest.id}: {quote_path(edit.path)} is {edit.action}d by the patch; only modified or created "
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
                                   str(version), fixed_in, tuple(files), spec.versions)
    return hotfix, outputs


class _BaselineReader:
    """Reads a target as it was before a recorded, applied hotfix: its files from the kept backups."""

    def __init__(self, tree, backups: dict):
        self.tree, self.backups = tree, backups

    def __call__(self, relpath: str):
        from vllm_hotfix.core.apply import FileState

        if relpath in self.backups:
            data = self.backups[relpath]
            found = self.tree.read(relpath)
            return None if data is None else FileState(data, found.mode if found else 0o100644)
        return self.tree.read(relpath)


def _recorded_baseline(hotfix_id: str, target):
    """On a host where the hotfix is applied and recorded: a reader of the baseline from its backups
    (each checked against the recorded before-hash), so export needs no reinstall. None otherwise."""
    from vllm_hotfix.core.verdict import APPLIED, files_verdict
    from vllm_hotfix.flow.plan import check_record
    from vllm_hotfix.install.tree import Tree
    from vllm_hotfix.txn.state import TargetState

    state = TargetState.for_root(target.root)
    recorded = state.hotfixes.get(hotfix_id)
    tree = Tree(target.root)
    if recorded is None or files_verdict(check_record(recorded, tree))[0] != APPLIED:
        return None
    backups = {}
    for f in recorded.files:
        data = None
        if f.before_sha256 is not None:
            data = state.read_backup(recorded, f)
            if data is None:
                return None
        backups[f.path] = data
    return _BaselineReader(tree, backups)


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
