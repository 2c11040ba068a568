"""`hotfix check-catalog`: dry-run every manifest against every published release in its range.

Each cell of the id x release matrix is judged by ``flow.releases.on_release`` (applicability, then the
content rule of ``core.presence``) against the files read straight from the release's real wheel
(cached under ``paths.cache_dir()/wheels``, downloaded once; a release published only as an sdist is read
from the sdist; with ``--repo``, from the release's tag in a local clone): no install.
States: applies, fixed-upstream, fails (the first hunk error: the hotfix's fault), not-applicable,
unavailable (the index or the download failed: nobody's verdict, exit 10); git targets are skipped.
Before any release, each manifest's ``[[signatures]]`` are checked: signatures that can never name the
fix (``catalog.signatures.naming_problem``: none specific, e.g. the weights-only form of older manifests)
are a ``fails`` cell without a release (exit 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from packaging.utils import canonicalize_name
from packaging.version import Version

from vllm_hotfix.catalog.index import Catalog, parse_ref
from vllm_hotfix.catalog.model import Manifest, TargetSpec
from vllm_hotfix.catalog.signatures import naming_problem
from vllm_hotfix_guard.core import verdict
from vllm_hotfix.core.presence import APPLICABLE, CONTAINED
from vllm_hotfix_guard.errors import ExitCode, HotfixError, Unavailable
from vllm_hotfix.flow.releases import on_release, parse_versions, releases_in_scope, skip_reason
from vllm_hotfix_guard.output import emit_json, note, quote_path, say

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


def run(*, hotfix_ids: Sequence[str] = (), versions: str | None = None, repo: Path | None = None,
        catalogs: Sequence[Path] = (), as_json: bool = False) -> int:
    from vllm_hotfix.catalog.upstream import open_release, published_releases

    catalog = Catalog.load(catalogs)
    if hotfix_ids:
        manifests = [catalog.get(*parse_ref(ref)) for ref in hotfix_ids]
    else:  # --catalog DIR alone checks that catalog, not the built-in one's wheels too (issue 45: 2.6 GB)
        given = {str(Path(d).absolute()) for d in catalogs}
        manifests = [m for m in catalog.latest() if not given or (catalog.origin(m) is not None and
                                                                   str(catalog.origin(m).path.absolute()) in given)]
    wanted = parse_versions(versions)
    cells: list[Cell] = []
    jobs: list[tuple[Manifest, TargetSpec, str]] = []
    for manifest in manifests:
        problem = naming_problem(manifest.signatures)
        if problem:
            cells.append(Cell(manifest.ref, manifest.targets[0].distribution, None, FAILS, f"signatures: {problem}"))
        for target in manifest.targets:
            skip = skip_reason(manifest, target)
            if skip:
                cells.append(Cell(manifest.ref, target.distribution, None, SKIPPED, skip))
                continue
            try:
                published = None if wanted.exact is not None else published_releases(target.distribution, repo=repo)
            except Unavailable as exc:
                cells.append(Cell(manifest.ref, target.distribution, None, UNAVAILABLE, exc.message))
                continue
            releases = releases_in_scope(manifest, target, wanted, published)
            if not releases:
                cells.append(Cell(manifest.ref, target.distribution, None, SKIPPED,
                                  f"no published release of {target.distribution} in {target.versions}"))
            jobs += [(manifest, target, release) for release in releases]

    for index, (manifest, target, release) in enumerate(jobs, start=1):
        why_not = on_release(manifest, target, release, None).why_not  # the same rule as apply
        if why_not is not None and why_not.state == NOT_APPLICABLE:
            cells.append(Cell(manifest.ref, target.distribution, release, why_not.state, why_not.message))
            continue
        note(f"[{index}/{len(jobs)}] {manifest.id} on {target.distribution} {release}")
        if why_not is not None:
            cells.append(Cell(manifest.ref, target.distribution, release, why_not.state, why_not.message))
            continue
        try:
            with open_release(target.distribution, release, repo=repo) as reader:
                below = [catalog.get(*parse_ref(ref)) for ref in manifest.after]
                cells.append(_cell(manifest, target, release, on_release(manifest, target, release, reader, below).found))
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


def _cell(manifest: Manifest, target: TargetSpec, release: str, found) -> Cell:
    """The content answer as a cell: applies (exact / at offsets), else fails with why."""
    if found.state == APPLICABLE:
        offsets = [f"{quote_path(path)} {p.header.split(' @@')[0]} @@ {p.offset:+d}" for path, p in found.plan.offsets]
        detail = f"offset {'; '.join(offsets)}" if offsets else "exact"
        return Cell(manifest.ref, target.distribution, release, APPLIES, detail)
    detail = found.detail
    if found.state == CONTAINED:
        detail += "; declare fixed_in (or narrow [[targets]] versions) if upstream has the fix"
    return Cell(manifest.ref, target.distribution, release, FAILS, f"{found.state}: {detail}")


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
