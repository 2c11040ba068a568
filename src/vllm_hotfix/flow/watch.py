"""`hotfix catalog watch`: each hotfix against the releases published after the range its manifest records.

The manifest is the record: its target's ``versions`` range and its ``fixed_in`` say which releases the
catalog has judged. Every published release above the highest release inside the range is new, and is
judged on its real wheel (cached, never installed), by the rules `check-catalog` and `port` use:

- in a declared ``fixed_in`` (core/pep440.fixed_by): **fixed upstream** (the applicability rule, as check-catalog says;
  no wheel needed) -> propose retiring the hotfix once no host runs an older release;
- the hotfix's newest patch, its range opened upward, applies there: **still applies** -> propose
  extending the target's and that patch's range over it;
- the release holds the patch's post-image: **fixed upstream** by content -> propose ``fixed_in``;
- otherwise the patch **conflicts**: `port`'s merge (flow/port_plan.port, git merge-file) is run on it
  and its result shown: ported (a variant could be made: run `hotfix port`) or conflicts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from vllm_hotfix.catalog.model import Manifest, TargetSpec
from vllm_hotfix.core.presence import APPLICABLE, CONTAINED
from vllm_hotfix_guard.errors import HotfixError, Unavailable
from vllm_hotfix.flow.releases import on_release, skip_reason

FIXED, APPLIES, PORTED, CONFLICTS, UNAVAILABLE, SKIPPED, CURRENT = (
    "fixed-upstream", "still-applies", "ported", "conflicts", "unavailable", "skipped", "current")


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One hotfix on one new release: what was found and what to do about it."""

    hotfix: str  # id@version
    distribution: str
    release: str | None  # None: the hotfix was skipped or its releases could not be listed
    state: str
    detail: str = ""
    declared: bool = False  # fixed upstream by the manifest's own fixed_in (nothing to change)

    def to_json(self) -> dict:
        return {"hotfix": self.hotfix, "distribution": self.distribution, "release": self.release,
                "state": self.state, "detail": self.detail, "declared": self.declared}


@dataclass(frozen=True, slots=True, kw_only=True)
class Proposal:
    """What --write changes in one manifest: ``fixed_in`` (None: unchanged) and the range to extend to."""

    manifest: Manifest
    target: TargetSpec
    fixed_in: str | None = None
    extend_to: str | None = None  # the newest release the hotfix still applies to
    next_release: str | None = None  # the first published release after it (the new upper bound)


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def new_releases(target: TargetSpec, published: list[str], since: str | None = None) -> list[str]:
    """Published releases above the target's range -- at or above its lower bounds, outside it, and above the
    highest published release inside it -- and above ``since``, oldest first."""
    inside = [Version(r) for r in published if target.contains(r)]
    top = max(inside) if inside else None
    floor = _version(since) if since else None
    lower = SpecifierSet(open_range(target.versions) or "")
    out = [r for r in published if _version(r) is not None and not target.contains(r)
           and lower.contains(r, prereleases=True) and (top is None or Version(r) > top)
           and (floor is None or Version(r) > floor)]
    return sorted(out, key=Version)


def open_range(versions: str | None) -> str | None:
    """``versions`` without its upper bounds and exclusions ('>=0.25.0,<0.32.0' -> '>=0.25.0')."""
    if versions is None:
        return None
    kept = [str(s) for s in SpecifierSet(versions) if s.operator not in ("<", "<=", "!=", "==", "===", "~=")]
    return ",".join(sorted(kept))


def opened(manifest: Manifest, target: TargetSpec) -> tuple[Manifest, TargetSpec]:
    """The manifest with the target's and the newest patch's ranges opened upward, without fixed_in."""
    wide_target = replace(target, versions=open_range(target.versions))
    targets = tuple(wide_target if t is target else t for t in manifest.targets)
    patches = list(manifest.patches)
    newest = newest_patch(manifest)
    if newest is not None:
        patches[newest] = replace(patches[newest], versions=open_range(patches[newest].versions))
    return replace(manifest, targets=targets, patches=tuple(patches), fixed_in=None), wide_target


def newest_patch(manifest: Manifest) -> int | None:
    """The index of the file patch covering the newest releases (the last one with a range, else the last)."""
    files = [i for i, p in enumerate(manifest.patches) if p.kind == "file"]
    if not files:
        return None

    def floor(index: int) -> Version:
        versions = manifest.patches[index].versions
        lows = [Version(s.version) for s in SpecifierSet(versions or "") if s.operator in (">=", ">", "==", "~=")
                and _version(s.version)]
        return max(lows) if lows else Version("0")

    return max(files, key=lambda i: (floor(i), i))


def watch_target(manifest: Manifest, target: TargetSpec, published: list[str], *, since: str | None,
                 open_release: Callable, port: Callable | None) -> tuple[list[Row], Proposal]:
    """Rows for every new release of one manifest target, and what --write would change."""
    rows: list[Row] = []
    wide, wide_target = opened(manifest, target)
    to_port: list[str] = []
    releases = new_releases(target, published, since)
    if not releases:
        newest = max(published, key=Version) if published else "none"
        rows.append(Row(hotfix=manifest.ref, distribution=target.distribution, release=None, state=CURRENT,
                        detail=f"no release published after its range {target.versions} (newest with a wheel: {newest})"))
    for release in releases:
        if manifest.is_fixed_in(release):
            rows.append(Row(hotfix=manifest.ref, distribution=target.distribution, release=release, state=FIXED,
                            declared=True, detail=f"fixed_in {manifest.fixed_in.describe()} is declared: retire the "
                                                  f"hotfix once no host runs a release below it"))
            continue
        detail = "the newest patch does not apply"
        try:
            judged = on_release(wide, wide_target, release, open_release(release))
            found = judged.found
            if judged.why_not is not None:
                detail = judged.why_not.message
        except Unavailable as exc:
            rows.append(Row(hotfix=manifest.ref, distribution=target.distribution, release=release,
                            state=UNAVAILABLE, detail=exc.message))
            continue
        except HotfixError as exc:
            found, detail = None, exc.message
        if found is not None and found.state == APPLICABLE:
            rows.append(Row(hotfix=manifest.ref, distribution=target.distribution, release=release, state=APPLIES,
                            detail="the newest patch applies unchanged: extend its range and the target's"))
        elif found is not None and found.state == CONTAINED:
            rows.append(Row(hotfix=manifest.ref, distribution=target.distribution, release=release, state=FIXED,
                            detail="the release holds the patch's result (by content): declare fixed_in"))
        else:
            to_port.append(release)
            rows.append(Row(hotfix=manifest.ref, distribution=target.distribution, release=release, state=CONFLICTS,
                            detail=(found.detail if found is not None else detail) or detail))
    if to_port and port is not None:
        rows = _ported(rows, port(replace(manifest, targets=wide.targets, fixed_in=None), wide_target, to_port))
    return rows, _proposal(manifest, target, rows, published)


def _ported(rows: list[Row], result) -> list[Row]:
    """The conflicting rows with `port`'s outcome on each release."""
    by_release = {r.release: r for r in result.releases}
    out = []
    for row in rows:
        outcome = by_release.get(row.release) if row.state == CONFLICTS else None
        if outcome is None:
            out.append(row)
        elif outcome.state == "ported":
            out.append(replace(row, state=PORTED, detail=f"port merged a variant from {outcome.base}: {outcome.detail}; "
                                                         f"write it with `hotfix port`"))
        elif outcome.state == FIXED:
            out.append(replace(row, state=FIXED, detail=outcome.detail))
        else:
            out.append(replace(row, detail=f"port: {outcome.state}: {outcome.detail}"))
    return out


def _proposal(manifest: Manifest, target: TargetSpec, rows: list[Row], published: list[str]) -> Proposal:
    fixed = [r.release for r in rows if r.state == FIXED and not r.declared]
    applies = [r.release for r in rows if r.state == APPLIES]
    first_fixed = min(fixed, key=Version) if fixed and manifest.fixed_in is None else None
    extend = [r for r in applies if first_fixed is None or Version(r) < Version(first_fixed)]
    # extending is only sound over an unbroken run of releases: stop at the first one that does not apply
    run_end = None
    for row in sorted((r for r in rows if r.release), key=lambda r: Version(r.release)):
        if row.release in extend:
            run_end = row.release
        else:
            break
    later = [r for r in sorted(published, key=Version) if run_end and Version(r) > Version(run_end)]
    return Proposal(manifest=manifest, target=target, fixed_in=first_fixed, extend_to=run_end,
                    next_release=later[0] if later else None)


def skipped_row(manifest: Manifest, target: TargetSpec) -> Row | None:
    why = skip_reason(manifest, target)
    if not why:
        return None
    return Row(hotfix=manifest.ref, distribution=target.distribution, release=None, state=SKIPPED, detail=why)
