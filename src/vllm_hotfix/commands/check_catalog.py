"""`hotfix check-catalog`: dry-run every manifest against every published release in its range.

Each cell of the id x release matrix is planned with the pure engine against the files read straight
from the release's real wheel (cached under ``paths.cache_dir()/wheels``, downloaded once): no install.
States: applies, fixed-upstream, fails (first hunk error: the hotfix's fault), not-applicable,
unavailable (the index or the download failed: nobody's verdict, exit 10); git targets are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from vllm_hotfix.catalog.index import Catalog, parse_ref
from vllm_hotfix.core.apply import FileState, Reader, plan_patch
from vllm_hotfix.errors import DoesNotApply, ExitCode, HotfixError, InvalidInput, Unavailable, UsageError
from vllm_hotfix.catalog.model import Manifest, TargetSpec
from vllm_hotfix.core import verdict
from vllm_hotfix.flow.applicability import applicability
from vllm_hotfix.flow.hotfix import checked_patch
from vllm_hotfix.install.locate import Target
from vllm_hotfix.output import emit_json, note, quote_path, say

# Per release: the hotfix's own states (core.verdict) where it does not belong, else what the dry run found.
FIXED, NOT_APPLICABLE = verdict.FIXED_UPSTREAM, verdict.NOT_APPLICABLE
APPLIES, FAILS, SKIPPED, UNAVAILABLE = "applies", "fails", "skipped", "unavailable"


@dataclass(frozen=True)
class Cell:
    """One (hotfix, release) cell of the catalog check matrix and its outcome."""

    hotfix: str  # id@version
    distribution: str
    release: str | None  # None for a skipped manifest
    state: str
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"hotfix": self.hotfix, "distribution": self.distribution, "release": self.release,
                "state": self.state, "detail": self.detail}


def run(*, hotfix_ids: Sequence[str] = (), versions: str | None = None, catalogs: Sequence[Path] = (),
        as_json: bool = False) -> int:
    from vllm_hotfix.catalog.upstream import WheelReader, published_releases, published_wheel

    catalog = Catalog.load(catalogs)
    manifests = [catalog.get(*parse_ref(ref)) for ref in hotfix_ids] if hotfix_ids else list(catalog.latest())
    explicit, wanted_range = _parse_versions(versions)
    cells: list[Cell] = []
    jobs: list[tuple[Manifest, TargetSpec, str]] = []
    for manifest in manifests:
        for target in manifest.targets:
            skip = _skip_reason(manifest, target)
            if skip:
                cells.append(Cell(manifest.ref, target.distribution, None, SKIPPED, skip))
                continue
            try:
                releases = explicit if explicit is not None else _releases_in_scope(
                    manifest, target, published_releases(target.distribution), wanted_range)
            except Unavailable as exc:
                cells.append(Cell(manifest.ref, target.distribution, None, UNAVAILABLE, exc.message))
                continue
            if not releases:
                cells.append(Cell(manifest.ref, target.distribution, None, SKIPPED,
                                  f"no published wheel of {target.distribution} in {target.versions}"))
            jobs += [(manifest, target, release) for release in releases]

    for index, (manifest, target, release) in enumerate(jobs, start=1):
        why_not = applicability(manifest, target, _release_target(target, release))  # the same rule as apply
        if why_not is not None and why_not.state == NOT_APPLICABLE:
            cells.append(Cell(manifest.ref, target.distribution, release, why_not.state, why_not.message))
            continue
        note(f"[{index}/{len(jobs)}] {manifest.id} on {target.distribution} {release}")
        if why_not is not None:
            cells.append(Cell(manifest.ref, target.distribution, release, why_not.state, why_not.message))
            continue
        try:
            wheel = published_wheel(target.distribution, release)
            with WheelReader(wheel) as reader:
                cells.append(_dry_run(manifest, target, release, reader))
        except Unavailable as exc:
            cells.append(Cell(manifest.ref, target.distribution, release, UNAVAILABLE, exc.message))
        except HotfixError as exc:
            cells.append(Cell(manifest.ref, target.distribution, release, FAILS, exc.message))

    failed = [c for c in cells if c.state == FAILS]
    unavailable = [c for c in cells if c.state == UNAVAILABLE]
    if as_json:
        emit_json({"ok": not failed and not unavailable, "cells": [c.to_json() for c in cells]})
    else:
        _print_matrix(cells)
    return 1 if failed else int(ExitCode.UNAVAILABLE) if unavailable else 0


def _parse_versions(text: str | None) -> tuple[list[str] | None, SpecifierSet | None]:
    """'0.30.0,0.31.0' -> exact releases (no PyPI listing needed); '>=0.30' -> a range of published ones."""
    if not text:
        return None, None
    if any(op in text for op in "<>=!~"):
        try:
            return None, SpecifierSet(text)
        except InvalidSpecifier:
            raise UsageError(f"--versions {text!r}: not a PEP 440 range (e.g. '>=0.30,<0.33')") from None
    releases = [v.strip() for v in text.split(",") if v.strip()]
    for release in releases:
        try:
            Version(release)
        except InvalidVersion:
            raise UsageError(f"--versions: {release!r} is not a release number (e.g. 0.30.0,0.31.0)") from None
    return releases, None


def _skip_reason(manifest: Manifest, target: TargetSpec) -> str:
    if manifest.kind == "advisory":
        return "advisory: no patch to check"
    if target.git is not None or target.versions is None:
        return "git target (check it on a checkout: hotfix apply --dry-run --root DIR)"
    kinds = {p.kind for p in manifest.patches}
    if "external" in kinds:
        return "needs a separately distributed patch file"
    if "commit" in kinds:
        return "needs an upstream clone (hotfix apply --dry-run --upstream-repo PATH)"
    return ""


def _releases_in_scope(manifest: Manifest, target: TargetSpec, published: list[str],
                       wanted: SpecifierSet | None) -> list[str]:
    """Published releases in the target's range, plus the release that fixed it upstream."""
    fixed = manifest.fixed_in.version if manifest.fixed_in else None
    chosen = [r for r in published if target.contains(r) or r == fixed]
    if wanted is not None:
        chosen = [r for r in chosen if wanted.contains(r, prereleases=True)]
    return chosen


def _release_target(spec: TargetSpec, release: str) -> Target:
    """A published release as a target (read from its wheel, never installed)."""
    where = Path(f"<{spec.distribution}-{release}.whl>")
    return Target(package=spec.package, distribution=spec.distribution, version=release, kind="wheel",
                  package_dir=where / spec.package, root=where, dist_info=None, python=None, git=None, warnings=())


def _dry_run(manifest: Manifest, target: TargetSpec, release: str, read: Reader) -> Cell:
    """Plan the manifest's patch series for ``release`` against ``read``; the same checks as apply."""
    overlay: dict[str, FileState | None] = {}

    def current(path: str) -> FileState | None:
        return overlay[path] if path in overlay else read(path)

    offsets = []
    try:
        for spec in manifest.patches_for(release):
            data = manifest.patch_path(spec).read_bytes()
            plan = plan_patch(checked_patch(spec, data, spec.label).patch, current)
            for edit in plan.edits:
                if edit.old_path and edit.action == "rename":
                    overlay[edit.old_path] = None
                overlay[edit.path] = None if edit.after is None else FileState(edit.after, edit.new_mode or edit.old_mode or 0o644)
            offsets += [f"{quote_path(path)} {p.header.split(' @@')[0]} @@ {p.offset:+d}" for path, p in plan.offsets]
    except (DoesNotApply, InvalidInput) as exc:
        return Cell(manifest.ref, target.distribution, release, FAILS, exc.message)
    except OSError as exc:
        return Cell(manifest.ref, target.distribution, release, FAILS, f"cannot read patch: {exc}")
    detail = f"offset {'; '.join(offsets)}" if offsets else "exact"
    return Cell(manifest.ref, target.distribution, release, APPLIES, detail)


def _print_matrix(cells: list[Cell]) -> None:
    rows: dict[tuple[str, str], dict[str, Cell]] = {}
    skipped = []
    for cell in cells:
        if cell.release is None:
            skipped.append(cell)
        else:
            rows.setdefault((cell.hotfix, canonicalize_name(cell.distribution)), {})[cell.release] = cell
    releases = sorted({c.release for c in cells if c.release}, key=Version)
    header = ["HOTFIX", "TARGET", *releases]
    table = [header] + [[hotfix, dist, *(row[r].state if r in row else "" for r in releases)]
                        for (hotfix, dist), row in rows.items()]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table if rows else ():
        say("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    for cell in skipped:
        say(f"{cell.hotfix} ({cell.distribution}): {cell.state}: {cell.detail}")
    for cell in cells:
        if cell.state in (FAILS, UNAVAILABLE) and cell.release is not None:
            say(f"{cell.hotfix} on {cell.distribution} {cell.release}: {cell.state}: {cell.detail}")
    if not cells:
        say("nothing to check")
