"""Exporting hotfixes for bind mounts: the patched files of a series, computed from pristine bytes, and
the lock that says what every container must have in effect. Nothing in the install is written.

The series is built in the order the hotfixes are named, as `hotfix apply` would build it on that
install: each hotfix planned on what the ones before it left, refused where `apply` would refuse
(outside its range, fixed upstream, hunks that meet another's lines unless its manifest orders them).
The pristine bytes are the install's files, proven against pip's RECORD -- or, for files a recorded
series changed on this host, derived from that series (every step checked against its recorded patch)
and proven against RECORD the same way, so export needs no reinstall where the hotfixes are applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from vllm_hotfix import __version__
from vllm_hotfix_guard.txn import lockcode, hotfix_lock
from vllm_hotfix_guard.core.hunk_apply import FileState, plan_patch
from vllm_hotfix_guard.core.diff import Patch
from vllm_hotfix.core.regions import Overlaps, spans_of
from vllm_hotfix_guard.errors import DoesNotApply, FixedUpstream, Refused, WriteFailed
from vllm_hotfix.flow.applicability import check_applicable
from vllm_hotfix.flow.hotfix import catalog_hotfix, sha256
from vllm_hotfix.flow.baseline_proof import prove_bytes_pristine, prove_files_pristine
from vllm_hotfix.flow.resolve import Resolver, target_option
from vllm_hotfix.flow.series import Series, apply_part, steps_by_path
from vllm_hotfix.install.tree import Tree
from vllm_hotfix_guard.output import quote_path
from vllm_hotfix_guard.paths import LOCK_NAME, TargetDir
from vllm_hotfix_guard.txn.state import TargetState
from vllm_hotfix_guard.paths import make_state_dir  # 0o755 whatever the umask


@dataclass(frozen=True)
class Export:
    """What `hotfix export` writes: the lock, and the bytes of every exported file by export path."""

    lock: hotfix_lock.Lock
    outputs: dict
    lock_path: Path | None  # where `hotfix export` writes it (None: not written)
    held: tuple = ()  # site-packages paths whose installed bytes held the change already (a mount, a hand apply)


class _Pristine:
    """A reader of the install as it was before any recorded hotfix: derived bytes for the files the
    recorded series touches, the files on disk for the others."""

    def __init__(self, target):
        self.tree = Tree(target.root)
        state = TargetState.for_root(target.root)
        self.series = Series(state, self.tree)
        self.derived: dict[str, bytes | None] = {}
        self.held: dict[str, FileState | None] = {}  # unrecorded files that hold a hotfix: the bytes before it

    def __call__(self, path: str):
        if path in self.held:
            return self.held[path]
        if path in self.series.chains:
            if path not in self.derived:
                self.derived[path] = self.series.pristine([path])[path]
            data = self.derived[path]
            found = self.tree.read(path)
            return None if data is None else FileState(data, found.mode if found else 0o100644)
        return self.tree.read(path)


def plan_export(manifests: Sequence, *, python: str | None, out_dir: Path | None, lock_version: int | None = None,
                expires: str | None = None, guard: tuple | None = None, catalog=None) -> Export:
    """The lock and the files for ``manifests`` in this order (one series per target); with ``out_dir``,
    below the hotfixes exported there before (None: these alone, as `hotfix pack` takes them). The lock's
    ``version``: ``lock_version``, else one more than the lock already in ``out_dir`` (else 1); a
    version that does not go up is refused. ``expires``: RFC 3339 UTC, or None. ``catalog``: the loaded
    catalog, whose --catalog dirs a refusal's `hotfix show ID` names (flow/applicability.check_applicable)."""
    resolver = Resolver(python)
    targets: dict[str, object] = {}
    readers: dict[str, _Pristine] = {}
    overlay: dict[str, dict[str, FileState | None]] = {}   # package -> path -> bytes after the series so far
    chains: dict[tuple[str, str], list] = {}               # (package, path) -> [(id, before, after, part)]
    locked: list[hotfix_lock.LockedHotfix] = []
    for manifest in manifests:
        target, spec = _exportable(manifest, resolver, catalog)
        package = target.package
        targets.setdefault(package, target)
        pristine = readers.setdefault(package, _Pristine(target))
        files = overlay.setdefault(package, {})

        def read(path: str, files=files, pristine=pristine):
            return files[path] if path in files else pristine(path)

        series = catalog_hotfix(manifest, target).series
        plan = _planned(manifest.id, series, read, pristine, files, target)
        mine = []
        for edit in plan.edits:
            if edit.action not in ("modify", "create") or edit.after is None:
                raise Refused(f"{manifest.id}: {quote_path(edit.path)} is {edit.action}d by the patch; only modified or created "
                              f"files can be bind-mounted", hint="apply this hotfix in the image instead (`hotfix apply`)")
            chain = chains.setdefault((package, edit.path), [])
            part = Patch(tuple(fp for fp in series.files if edit.path in (fp.old_path, fp.new_path)), manifest.ref)
            if chain:
                _refuse_overlap(manifest, edit.path, chain, part, read)
            chain.append((manifest.id, edit.before, edit.after, part))
            mode = (files.get(edit.path) or pristine(edit.path) or FileState(b"", 0o100644)).mode
            files[edit.path] = FileState(edit.after, mode)
            mine.append(edit.path)
        fixed_in = manifest.fixed_in.version if manifest.fixed_in else None
        locked.append(hotfix_lock.LockedHotfix(
            manifest.id, manifest.version, spec.distribution, spec.package, str(target.version), fixed_in,
            tuple(hotfix_lock.LockedFile(path, "", None, "") for path in sorted(mine)), spec.versions))
    for package, reader in readers.items():  # every path's bytes before the series: pristine, proven
        paths = {path for (pkg, path) in chains if pkg == package}
        target = targets[package]
        try:
            prove_files_pristine(target, None, sorted(p for p in paths if p not in reader.series.chains
                                                      and p not in reader.held))
            derived = {p: reader(p) for p in paths if p in reader.series.chains or p in reader.held}
            if derived:
                prove_bytes_pristine(target, None, {p: f.data if f else None for p, f in derived.items()})
        except Refused as exc:  # reinstalling cannot change a file a mount hides: its hint names the mount
            owners = {path: chain[0][0] for (pkg, path), chain in chains.items() if pkg == package}
            raise _through_mount(exc, target, owners) from None
    outputs: dict[str, bytes] = {}
    top_of: dict[tuple[str, str], str] = {}
    for (package, path), chain in chains.items():
        top_id, _, after, _ = chain[-1]
        export = f"{top_id}/{path}"
        outputs[export] = after
        top_of[(package, path)] = export
    code = _code_names(locked, chains, outputs, top_of, python=next(iter(targets.values())).python if targets else python)
    final = _with_sums(locked, chains, top_of, code)
    site_packages = str(next(iter(targets.values())).root)
    lock_path = Path(out_dir) / LOCK_NAME if out_dir is not None else None
    previous = hotfix_lock.load_lock(lock_path) if lock_path is not None and lock_path.exists() else None
    version = _next_version(lock_path, previous, lock_version)
    lock = hotfix_lock.Lock(site_packages=site_packages, hotfixes=_merge(lock_path, site_packages, final, previous),
                         generator=f"vllm-hotfix {__version__}", version=version, expires=expires, guard=guard)
    held = tuple(sorted(p for reader in readers.values() for p in reader.held))
    return Export(lock, outputs, lock_path, held)


def _planned(hotfix_id: str, series: Patch, read, pristine: _Pristine, files: dict, target):
    """The plan of ``series`` on what ``read`` gives, judged by core/presence.presence (the rule `status` and
    `apply` judge an unrecorded file by). Where the installed files already hold its change -- the patched
    file of an earlier export bind-mounted over site-packages, or applied by hand -- the bytes before it are
    its reverse: they become the pristine reader's (proven against RECORD like any other), and the plan from
    them must give the very bytes on disk, which are then exported as they are (issue 45). Anything else
    that does not apply is refused as before, naming a mount it comes through."""
    from vllm_hotfix.core.presence import APPLICABLE, CONTAINED, presence
    from vllm_hotfix.flow.plan import flatten

    found = presence(series, read)
    if found.state == APPLICABLE:
        return found.plan
    held = flatten(found.plan) if found.state == CONTAINED else []
    if not held or any(p in files or p in pristine.series.chains for p, _, _ in held):
        error = found.error or DoesNotApply(f"{hotfix_id}: {found.detail}", hint="nothing was written")
        raise _through_mount(error, target, {f.new_path or f.old_path: hotfix_id for f in series.files})
    on_disk = {}
    for path, now, before in held:
        found_file = pristine.tree.read(path)
        on_disk[path] = now
        pristine.held[path] = None if before is None else FileState(before, found_file.mode if found_file else 0o100644)
    plan = plan_patch(series, read)
    if any(edit.after != on_disk.get(edit.path) for edit in plan.edits):  # pragma: no cover - reverse, then forward
        raise DoesNotApply(f"{hotfix_id}: the installed files hold its change, but not as the patch writes it",
                           hint="reinstall the package (its files come back pristine), then export")
    return plan


def _through_mount(exc, target, owners: dict):
    """``exc`` naming the bind mount the first mounted file of ``owners`` (path -> the hotfix exported on
    it) comes through, with flow/mounted's remedy; ``exc`` itself when none is mounted."""
    from vllm_hotfix.flow.mounted import refusal_through_mount
    from vllm_hotfix_guard.install.mounts import mounted_files

    mounted = mounted_files(target.root, [p for p in owners if p])
    if not mounted:
        return exc
    path = next(iter(mounted))
    return refusal_through_mount(exc, target, [path], owners[path])


def _exportable(manifest, resolver: Resolver, catalog):
    """(target, spec) of ``manifest`` if export can carry it: applicable here (the resolution and rules of
    `hotfix apply`), a pip-installed wheel (its RECORD proves the baseline), catalog patch files only, and no
    interrupted transaction on the target."""
    target, spec = resolver.for_manifest(manifest)  # the same resolution and applicability as `hotfix apply`
    try:
        check_applicable(manifest, spec, target, catalog)
    except FixedUpstream as exc:
        raise FixedUpstream(exc.message, hint="drop any bind mount of this hotfix from the compose file "
                                              f"(`hotfix compose {manifest.id} --remove`)") from None
    where = f"{spec.distribution} {target.version} at {target.package_dir}"
    if target.kind != "wheel" or target.dist_info is None:
        raise Refused(f"{manifest.id}: {where} is a {target.kind} install; export needs a pip-installed wheel "
                      f"whose RECORD proves the baseline", hint="run export against a pristine wheel install of the same version")
    for patch_spec in manifest.patches_for(target.version):
        if patch_spec.kind != "file":
            raise Refused(f"{manifest.id}: patch {patch_spec.label} is a {patch_spec.kind} patch; export supports "
                          f"catalog patch files", hint="apply it in the image with `hotfix apply` instead")
    if TargetDir.of(target.root).pending():
        raise Refused(f"{manifest.id}: an apply or rollback on {target.root} was interrupted: its files may be "
                      f"half-written", hint=f"run `hotfix recover {target_option(target)}` first")
    return target, spec


def _with_sums(locked, chains: dict, top_of: dict, code: dict) -> list:
    """The locked hotfixes with each file's sha256 after and before its step of the series, where it is
    exported (the top of the series) and the code it changes."""
    final = []
    for hotfix in locked:
        files = []
        for f in hotfix.files:
            step = next(s for s in chains[(hotfix.package, f.path)] if s[0] == hotfix.id)
            files.append(hotfix_lock.LockedFile(f.path, sha256(step[2]), sha256(step[1]), top_of[(hotfix.package, f.path)],
                                             code.get((hotfix.id, f.path))))
        final.append(hotfix_lock.LockedHotfix(hotfix.id, hotfix.version, hotfix.distribution, hotfix.package,
                                           hotfix.baseline_version, hotfix.fixed_in, tuple(files), hotfix.versions))
    return final


def _code_names(locked, chains: dict, outputs: dict, top_of: dict, *, python: str | None) -> dict:
    """(hotfix id, path) -> lockcode.LockedCode for every locked Python file: the functions, methods and
    classes the hotfix's own hunks touch (its step of the file's series), fingerprinted as compiled from
    the file that runs (the top of the series) by the interpreter that runs vLLM (install/codeprobe.py).
    A fixed file that does not compile there is refused: it would not import either."""
    from vllm_hotfix.core.regions import changed_ranges
    from vllm_hotfix.install.codeprobe import Job, ask

    jobs = []
    for hotfix in locked:
        for f in hotfix.files:
            if not f.path.endswith(".py"):
                continue
            before, after, part = next((s[1], s[2], s[3]) for s in chains[(hotfix.package, f.path)] if s[0] == hotfix.id)
            _, placed = apply_part(part, f.path, before, 0o100644)
            regions = changed_ranges([spans_of(fp.hunks, placements) for fp, placements in placed])
            jobs.append(Job((hotfix.id, f.path), after, regions, outputs[top_of[(hotfix.package, f.path)]], f.path))
    if not jobs:
        return {}
    interpreter, results = ask(jobs, python)
    found = {}
    for (hotfix_id, path), result in results.items():
        if isinstance(result, str):
            raise Refused(f"{hotfix_id}: the fixed {quote_path(path)} does not compile in the target interpreter "
                          f"({interpreter}): {result}", hint="fix the patch for this Python version; nothing was written")
        found[(hotfix_id, path)] = lockcode.LockedCode(interpreter, tuple(
            lockcode.LockedName(name, kind, fingerprint) for name, kind, fingerprint in result))
    return found


def _refuse_overlap(manifest, path: str, chain: list, part: Patch, read) -> None:
    """The lock carries the series `apply` would build: the same overlap rule (flow/plan)."""
    tracker = Overlaps()
    found = read(path)
    mode = found.mode if found else 0o100644
    for owner, before, _, owner_part in chain:
        _, placed = apply_part(owner_part, path, before, mode)
        for fp, placements in placed:
            tracker.step(owner, spans_of(fp.hunks, placements))
    _, placed = apply_part(part, path, chain[-1][2], mode)
    hits: list[str] = []
    for fp, placements in placed:
        hits += tracker.step(manifest.id, spans_of(fp.hunks, placements))
    hits = [h for h in dict.fromkeys(hits) if h not in (manifest.after or ())]
    if hits:
        raise Refused(f"{manifest.id} and {', '.join(hits)} change the same lines of {quote_path(path)}",
                      hint=f"declare after = [\"{hits[0]}\"] in {manifest.id}'s manifest if it goes on top of it, "
                           "or export them separately")


def _next_version(lock_path: Path | None, previous, wanted: int | None) -> int:
    """The new lock's version: ``wanted``, else the previous lock's + 1, else 1; never down or the same
    (a trust policy's min_version refuses what is older: a version names one lock)."""
    before = previous.version if previous is not None and previous.version is not None else 0
    version = wanted if wanted is not None else before + 1
    if version <= before:
        raise Refused(f"--lock-version {version}: {lock_path} is already version {before}; a new lock needs a higher one",
                      hint=f"use --lock-version {before + 1} or more, or export into a new directory")
    return version


def _merge(lock_path: Path | None, site_packages: str, exported: list[hotfix_lock.LockedHotfix], previous) -> tuple:
    """Keep hotfixes exported earlier into the same directory (same site-packages) below the new ones,
    as long as no file is shared (the series of a shared file is exported in one run)."""
    if previous is None:
        return tuple(exported)
    if previous.site_packages != site_packages:
        raise Refused(f"{lock_path} was exported for site-packages {previous.site_packages}, not {site_packages}",
                      hint="export into a new directory")
    ids = {h.id for h in exported}
    kept = tuple(h for h in previous.hotfixes if h.id not in ids)
    mine = {f.path for h in exported for f in h.files}
    for h in kept:
        shared = sorted(mine & {f.path for f in h.files})
        if shared:
            raise Refused(f"{h.id} (exported earlier into {lock_path.parent}) and {', '.join(sorted(ids))} both "
                          f"change {quote_path(shared[0])}", hint=f"export them in one run, in series order: hotfix export {h.id} "
                                                      f"{' '.join(x.id for x in exported)} --to {lock_path.parent}")
    return kept + tuple(exported)


def write_export(out_dir: Path, export: Export) -> None:
    """The files, then the lock (atomically each; the lock last, so it never names a missing file)."""
    from vllm_hotfix_guard.txn.atomic import atomic_write

    tree = Tree(out_dir)
    try:
        make_state_dir(out_dir)
        for path, data in export.outputs.items():
            target = tree.path(path)
            make_state_dir(target.parent)
            atomic_write(target, data, 0o644)
        atomic_write(Path(out_dir) / LOCK_NAME, hotfix_lock.dump_lock(export.lock), 0o644)
    except OSError as exc:
        raise WriteFailed(f"{getattr(exc, 'filename', None) or out_dir}: cannot write the export: {exc.strerror}",
                          hint="the install was not touched; fix the directory and rerun") from None


def read_exported(directory: Path) -> tuple[hotfix_lock.Lock, bytes, dict]:
    """What `hotfix export` wrote into ``directory``, read back as input: the lock (parsed, and its
    bytes) and the bytes of every file it mounts, by export path (``txn.exported.read_exported``: real
    directories, regular files, bounded reads, each checked against the lock's sha256)."""
    directory = Path(directory)
    lock_bytes, lock = hotfix_lock.read_lock(directory / LOCK_NAME)
    from vllm_hotfix.txn.exported import read_exported as read_files

    return lock, lock_bytes, read_files(directory, lock.mounted_files(), directory / LOCK_NAME)
