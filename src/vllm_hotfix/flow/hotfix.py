"""What to apply: a catalog manifest or an ad-hoc diff, its patch bytes loaded and checked against their pins."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from vllm_hotfix_guard.core.diff import Patch, exclude_paths, parse_patch
from vllm_hotfix_guard.errors import InvalidInput, Refused
from vllm_hotfix_guard.inputs import PATCH_LIMIT, read_bounded
from vllm_hotfix_guard.inputs import read_patch_file as inputs_read_patch_file
from vllm_hotfix.install.locate import Target
from vllm_hotfix_guard.txn.fsops import sha256_hex
from vllm_hotfix_guard.txn.state import RecordedHotfix, TargetState

if TYPE_CHECKING:  # types only: a raw --patch apply never loads the catalog (packaging costs 25 ms)
    from vllm_hotfix.catalog.model import Manifest, PatchSpec


PATCH_CAP = PATCH_LIMIT  # inputs.PATCH_LIMIT: one cap for every patch file


def sha256(data: bytes | None) -> str | None:
    """Hex sha256 (None for None): txn.fsops.sha256_hex, which a transaction remembers, so the record
    and the journal hash each before / after content once."""
    return sha256_hex(data)


@dataclass(frozen=True)
class LoadedPatch:
    """A patch file's bytes, checked against the manifest's pins, and parsed."""

    label: str
    data: bytes  # the exact bytes, as pinned
    strip: int
    exclude: tuple[str, ...]
    patch: Patch  # parsed, excludes applied


@dataclass(frozen=True)
class Hotfix:
    """A catalog manifest or an ad-hoc diff, its patch bytes loaded and checked against their pins."""

    id: str
    version: int | str
    source: str  # 'catalog' | 'adhoc'
    patches: tuple[LoadedPatch, ...]
    manifest: Manifest | None = None
    package: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}" if self.source == "catalog" else self.id

    @property
    def series(self) -> Patch:
        """All patches as one: the planner chains several file patches of one path in order."""
        return Patch(tuple(f for p in self.patches for f in p.patch.files), self.ref)


def load_patch_bytes(data: bytes, *, label: str, strip: int, exclude: Sequence[str] = (),
                     parsed: Patch | None = None) -> LoadedPatch:
    patch = parsed if parsed is not None else parse_patch(data, strip=strip, source=label)
    if exclude:
        patch = exclude_paths(patch, exclude)
    return LoadedPatch(label, data, strip, tuple(exclude), patch)


def read_patch_file(patch_file: Path) -> bytes:
    """A ``--patch`` / ``--patch-file`` named on the command line: ``inputs.read_patch_file`` (a regular
    file, capped: a FIFO or ``/dev/zero`` is refused at once, exit 8)."""
    try:
        return inputs_read_patch_file(patch_file)
    except OSError as exc:
        raise InvalidInput(f"{patch_file}: cannot read: {exc.strerror}") from None


def adhoc_hotfix(patch_file: Path, *, hotfix_id: str | None, strip: int, package: str | None,
                 data: bytes | None = None, parsed: Patch | None = None) -> Hotfix:
    """A raw diff recorded under ``hotfix_id`` (default: the file name without extension)."""
    data = read_patch_file(patch_file) if data is None else data
    hotfix_id = hotfix_id or Path(patch_file).stem
    loaded = load_patch_bytes(data, label=str(patch_file), strip=strip, parsed=parsed)
    return Hotfix(hotfix_id, sha256(data)[:12], "adhoc", (loaded,), package=package)


def _manifest_patch_bytes(manifest: Manifest, spec: PatchSpec, patch_files: Sequence[Path],
                          upstream_repo: Path | None, target: Target) -> tuple[str, bytes]:
    if spec.kind == "file":  # a catalog's patch is input: a regular file of its own, capped, never a link
        path = manifest.patch_path(spec)
        try:
            return str(path), read_bounded(path, cap=PATCH_CAP, what="catalog patch file", follow_symlinks=False)
        except OSError as exc:
            raise InvalidInput(f"{path}: cannot read patch: {exc.strerror}") from None
    if spec.kind == "external":
        given = [Path(p) for p in patch_files if Path(p).name == spec.external]
        if not given:
            raise Refused(f"{manifest.ref}: needs the separately distributed patch file {spec.external}",
                          hint=f"get it from {spec.url} and pass --patch-file PATH/{spec.external}")
        return str(given[0]), read_patch_file(given[0])
    from vllm_hotfix.catalog.upstream import load_pinned_commit  # normalised diff, pin checked; GitPython lazily

    return spec.label, load_pinned_commit(spec, upstream_repo=upstream_repo, target_root=target.root)


def catalog_hotfix(manifest: Manifest, target: Target, *, patch_files: Sequence[Path] = (),
                   upstream_repo: Path | None = None) -> Hotfix:
    """Load every patch the manifest picks for the target's version; pins and stats checked first."""
    loaded = []
    for spec in manifest.patches_for(target.version):
        label, data = _manifest_patch_bytes(manifest, spec, patch_files, upstream_repo, target)
        loaded.append(checked_patch(spec, data, label))
    return Hotfix(manifest.id, manifest.version, "catalog", tuple(loaded), manifest, target.package)


def checked_patch(spec: PatchSpec, data: bytes, label: str) -> LoadedPatch:
    """A manifest patch's bytes checked against its pins and declared stats, parsed, excludes applied."""
    from vllm_hotfix.catalog.model import check_stats, verify_patch_bytes

    verify_patch_bytes(spec, data, label)
    whole = parse_patch(data, strip=spec.strip, source=label)
    check_stats(spec, whole.stats, label)  # declared stats describe the pinned file, before excludes
    return load_patch_bytes(data, label=label, strip=spec.strip, exclude=spec.exclude, parsed=whole)


def pin_problem(manifest: Manifest, recorded: RecordedHotfix, state: TargetState, target: Target) -> str | None:
    """Why a catalog hotfix's record does not hold the patch bytes its manifest pins for this version (the
    bytes kept in the state directory must be exactly the pinned ones), or None. Another version recorded
    (an upgrade pending) is not judged here."""
    from vllm_hotfix_guard.core.pep440 import same_version

    if recorded.source != "catalog" or not same_version(recorded.version, manifest.version):
        return None
    try:  # the patches of the release the record was made on (the package may have changed since)
        specs = manifest.patches_for(state.target.get("version") or target.version)
    except Refused:
        return None  # no patch for this release: applicability says why
    from vllm_hotfix_guard.txn.judgement import pin_problem as kept_problem

    return kept_problem(state, recorded, [(spec.md5, spec.sha256) for spec in specs], manifest.ref)
