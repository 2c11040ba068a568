"""Published releases as targets: which ones a command looks at, and a hotfix judged on one of them.

`check-catalog`, `port` and `contains --versions` share these rules: the releases come from the
configured index (``catalog.wheelindex``; an explicit list needs no listing), each is read from its
real wheel (cached, never installed), and a release the index lacks is ``unavailable`` (exit 10),
never a verdict about the hotfix. On a release, the hotfix is judged by ``applicability`` (its range,
``fixed_in``) and then by ``core.presence`` (its content): the same two rules as `apply` and `status`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from vllm_hotfix.catalog.model import Manifest, TargetSpec
from vllm_hotfix_guard.core.hunk_apply import FileState, Reader
from vllm_hotfix.core.presence import APPLICABLE, Presence, presence
from vllm_hotfix_guard.errors import Refused, UsageError
from vllm_hotfix.flow.applicability import Inapplicable, applicability, release_target
from vllm_hotfix.flow.hotfix import Hotfix, catalog_hotfix


@dataclass(frozen=True, slots=True, kw_only=True)
class Wanted:
    """What ``--versions`` asked for: exact releases (no index listing needed) or a range of published ones."""

    exact: tuple[str, ...] | None = None
    range: SpecifierSet | None = None

    def pick(self, published: list[str]) -> list[str]:
        """PEP 440's rule for the pre-releases of a listing: a range keeps one only when it names a pre-release
        itself ('>=0.30.0rc1'); no range keeps them all (the caller chose them)."""
        if self.exact is not None:
            return list(self.exact)
        if self.range is None:
            return list(published)
        return [r for r in published if self.range.contains(r)]


def parse_versions(text: str | None, option: str = "--versions") -> Wanted:
    """'0.30.0,0.31.0' -> exact releases; '>=0.30' -> a range of published ones; None -> no filter."""
    if not text:
        return Wanted()
    if any(op in text for op in "<>=!~"):
        try:
            return Wanted(range=SpecifierSet(text))
        except InvalidSpecifier:
            raise UsageError(f"{option} {text!r}: not a PEP 440 range (e.g. '>=0.30,<0.33')") from None
    releases = [v.strip() for v in text.split(",") if v.strip()]
    for release in releases:
        try:
            Version(release)
        except InvalidVersion:
            raise UsageError(f"{option}: {release!r} is not a release number (e.g. 0.30.0,0.31.0)") from None
    return Wanted(exact=tuple(sorted(set(releases), key=Version)))


def skip_reason(manifest: Manifest, target: TargetSpec) -> str:
    """Why a manifest target cannot be judged on published wheels ('' when it can)."""
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


def releases_in_scope(manifest: Manifest, target: TargetSpec, wanted: Wanted, published: list[str] | None) -> list[str]:
    """Published releases in the target's range, plus the release that fixed it upstream, as ``wanted`` filters them."""
    if wanted.exact is not None:
        return list(wanted.exact)
    fixed = manifest.fixed_in.first if manifest.fixed_in else None  # the lowest release fixed_in names
    chosen = [r for r in published or () if r == fixed or (target.contains(r) and _listed(target, wanted, r))]
    return wanted.pick(chosen)


def _listed(target: TargetSpec, wanted: Wanted, release: str) -> bool:
    """Whether a published release counts for a range: a final one always; a pre-release only when the target's
    range or ``--versions`` names a pre-release (PEP 440, as pip: ``==0.23.0rc1`` and ``>=0.30.0rc1`` do,
    ``>=0.29`` does not)."""
    spec = target.specifier
    named = spec is None or bool(spec.prereleases) or (wanted.range is not None and bool(wanted.range.prereleases))
    return named or not Version(release).is_prerelease


@dataclass(frozen=True, slots=True, kw_only=True)
class OnRelease:
    """A catalog hotfix on one published release: out of its scope (``why_not``), else its series and content."""

    release: str
    why_not: Inapplicable | None = None
    hotfix: Hotfix | None = None
    found: Presence | None = None


def on_release(manifest: Manifest, spec: TargetSpec, release: str, read: Reader | None,
               below: Sequence[Manifest] = ()) -> OnRelease:
    """``applicability`` first (range, fixed_in), then ``presence`` of the series picked for ``release``.

    ``read`` may be None only to ask the first question (the wheel is not needed when the answer is there);
    loading the series raises what ``catalog_hotfix`` raises (no patch for this version, pins). ``below``: the
    hotfixes this one goes on top of (its manifest's ``after``), applied first to what ``read`` gives.
    """
    target = release_target(spec, release)
    why_not = applicability(manifest, spec, target)
    if why_not is not None or read is None:
        return OnRelease(release=release, why_not=why_not)
    for under in below:
        read = _with_applied(under, release, read)
    hotfix = catalog_hotfix(manifest, target)
    return OnRelease(release=release, hotfix=hotfix, found=presence(hotfix.series, read))


def _with_applied(manifest: Manifest, release: str, read: Reader) -> Reader:
    """``read`` with ``manifest``'s series applied (a hotfix ``after`` names): refused when it does not apply."""
    spec = manifest.targets[0]
    found = presence(catalog_hotfix(manifest, release_target(spec, release)).series, read)
    if found.plan is None or found.state != APPLICABLE:
        raise Refused(f"{manifest.ref}, which it goes on top of, does not apply on {release}: {found.detail}")
    edits = {edit.path: edit for edit in found.plan.edits}

    def reader(path: str) -> FileState | None:
        edit = edits.get(path)
        if edit is None:
            return read(path)
        return None if edit.after is None else FileState(edit.after, edit.new_mode or edit.old_mode or 0o644)
    return reader

