"""`hotfix port`: make a catalog hotfix apply to published releases where none of its patches does.

For each release (oldest first), judged like `check-catalog` (``flow.releases.on_release``):
- outside the hotfix's targets -> ``not-applicable``; in ``fixed_in`` -> ``fixed-upstream``;
- a variant of the manifest applies -> ``applies``; a variant ported in this run applies -> ``ported``
  (that variant's range grows); the files already hold a variant's post-image -> ``fixed-upstream``
  (by content, the rule of `hotfix contains`; ``fixed_in`` is proposed when the manifest has none);
- else a three-way merge per file (``core.merge.three_way`` on ``git merge-file``): base = the pristine
  files of the nearest release where a variant applies, theirs = base + that variant, ours = this
  release's pristine files. Clean -> a new variant (``<release>.patch``, the diff ours -> merged),
  which must plan on the release and pass the manifest's ``[[checks]]`` -> ``ported``; otherwise
  ``conflicts`` (the hunk and both sides) or ``check-failed``.
Nothing here writes: the caller writes the variants and the edited manifest when every release is decided.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
from typing import Callable

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from vllm_hotfix.catalog.model import Manifest, PatchSpec, PatchStats, TargetSpec, failed_check
from vllm_hotfix_guard.core.hunk_apply import FileEdit, FileState, Plan, Reader
from vllm_hotfix_guard.core.diff import Patch, parse_patch
from vllm_hotfix.core.merge import MergeFile, three_way
from vllm_hotfix.install.git import diff_texts, merge_file
from vllm_hotfix.core.presence import APPLICABLE, CONTAINED, presence
from vllm_hotfix.core.render import file_diff
from vllm_hotfix_guard.core.verdict import FIXED_UPSTREAM
from vllm_hotfix_guard.errors import Refused, Unavailable
from vllm_hotfix.flow.releases import on_release
from vllm_hotfix_guard.output import note

APPLIES, PORTED, CONFLICTS, CHECK_FAILED, UNAVAILABLE = "applies", "ported", "conflicts", "check-failed", "unavailable"
FAILED = frozenset({CONFLICTS, CHECK_FAILED})

OpenRelease = Callable[[str], Reader]  # release -> a reader of its wheel (Unavailable when it cannot be had)


@dataclass(frozen=True, slots=True, kw_only=True)
class PortConflict:
    """One block of one file that both the release and the patch changed differently."""

    path: str
    hunk: str | None   # the header of the patch hunk it overlaps ('@@ -104,9 +104,21 @@')
    line: int | None   # where the block starts in the release's file
    release: bytes     # the release's lines ("ours")
    base: bytes        # the base release's lines
    patched: bytes     # the base release's lines with the patch ("theirs")

    def to_json(self) -> dict:
        text = lambda b: b.decode("utf-8", "replace")  # noqa: E731
        return {"path": self.path, "hunk": self.hunk, "line": self.line, "release": text(self.release),
                "base": text(self.base), "patched": text(self.patched)}


@dataclass(slots=True, kw_only=True)
class Variant:
    """A patch made by this run: its bytes, the release it was made on and every release it applies to."""

    file: str                 # relative to the catalog's patches/ ('mamba-align-block-size/0.26.0.patch')
    data: bytes
    made_on: str
    base: str                 # the release whose variant it was merged from
    from_label: str           # that variant's file(s)
    by_words: int
    releases: list[str] = field(default_factory=list)
    versions: str = ""

    @property
    def patch(self) -> Patch:
        return parse_patch(self.data, strip=1, source=self.file)

    def spec(self) -> PatchSpec:
        stats = self.patch.stats
        words = f"; {self.by_words} block(s) merged by words" if self.by_words else ""
        return PatchSpec(kind="file", file=self.file, versions=self.versions, strip=1,
                         md5=hashlib.md5(self.data, usedforsecurity=False).hexdigest(),
                         sha256=hashlib.sha256(self.data).hexdigest(),
                         stats=PatchStats(stats.files, stats.insertions, stats.deletions),
                         description=f"{', '.join(self.releases)} (ported by `hotfix port` from {self.from_label} "
                                     f"on {self.base}{words})")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleasePort:
    """What port found for one release."""

    release: str
    state: str  # APPLIES | PORTED | FIXED_UPSTREAM | NOT_APPLICABLE | CONFLICTS | CHECK_FAILED | UNAVAILABLE
    detail: str = ""
    variant: str | None = None  # the patch file(s) that apply there
    base: str | None = None     # ported: the release merged from
    by_content: bool = False    # fixed-upstream decided from the files, not from fixed_in
    conflicts: tuple[PortConflict, ...] = ()

    def to_json(self) -> dict:
        return {"release": self.release, "state": self.state, "detail": self.detail, "variant": self.variant,
                "base": self.base, "by_content": self.by_content, "conflicts": [c.to_json() for c in self.conflicts]}


@dataclass(frozen=True, slots=True, kw_only=True)
class PortResult:
    """Every release's outcome, the new variants, the existing patches whose range must exclude them."""

    releases: tuple[ReleasePort, ...]
    variants: tuple[Variant, ...]
    narrowed: dict[int, str]  # index into manifest.patches -> its new versions
    proposed_fixed_in: str | None

    @property
    def failed(self) -> bool:
        return any(r.state in FAILED for r in self.releases)

    @property
    def unavailable(self) -> bool:
        return any(r.state == UNAVAILABLE for r in self.releases)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Base:
    """A release where a variant applies: the plan of that variant on its pristine files."""

    release: str
    plan: Plan
    label: str


def _overlay(read: Reader, plan: Plan) -> Reader:
    changed: dict[str, FileState | None] = {}
    for edit in plan.edits:
        if edit.action == "rename" and edit.old_path:
            changed[edit.old_path] = None
        changed[edit.path] = None if edit.after is None else FileState(edit.after, edit.new_mode or edit.old_mode or 0o644)
    return lambda path: changed[path] if path in changed else read(path)


def _hunk_of(base: _Base, path: str, line: int | None) -> str | None:
    """The header of the base variant's hunk on ``path`` whose old lines hold ``line`` (or the nearest one)."""
    edit = next((e for e in base.plan.edits if e.path == path), None)
    if edit is None or not edit.placements:
        return None
    if line is None:
        return edit.placements[0].header.split(" @@")[0] + " @@"
    best = min(edit.placements, key=lambda p: abs(p.actual - line))
    return best.header.split(" @@")[0] + " @@"


def _merge_edit(edit: FileEdit, ours: FileState | None, merge_file: MergeFile, base: _Base
                ) -> tuple[bytes | None, list[PortConflict], int]:
    """The release's new bytes for one edited file (None: deleted), conflicts, blocks merged by words."""
    path = edit.path

    def conflict(why: str, release: bytes = b"") -> tuple[None, list[PortConflict], int]:
        return None, [PortConflict(path=path, hunk=_hunk_of(base, path, None), line=None, release=release or why.encode(),
                                   base=edit.before or b"", patched=edit.after or b"")], 0

    if edit.action in ("rename", "mode"):
        return conflict(f"a {edit.action} is not ported (make that variant by hand)")
    if edit.action == "create":
        if ours is None or ours.data == edit.after:
            return edit.after, [], 0
        return conflict("the release already has this file, with other content", ours.data)
    if edit.action == "delete":
        if ours is None or ours.data == edit.before:
            return None, [], 0
        return conflict("the patch deletes this file, which the release changed", ours.data)
    if ours is None:
        return conflict("the release has no such file")
    merged = three_way(ours.data, edit.before or b"", edit.after or b"", merge_file)
    if merged.data is not None:
        return merged.data, [], merged.by_words
    return None, [PortConflict(path=path, hunk=_hunk_of(base, path, c.base_line), line=c.ours_line, release=c.ours,
                               base=c.base, patched=c.theirs) for c in merged.conflicts], merged.by_words


def _describe_conflicts(conflicts: tuple[PortConflict, ...]) -> str:
    first = conflicts[0]
    where = f" at line {first.line}" if first.line else ""
    more = f" (+{len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
    return f"{first.path}: hunk {first.hunk or '(whole file)'} conflicts{where}{more}"


class _Porter:
    def __init__(self, manifest: Manifest, spec: TargetSpec, open_release: OpenRelease, merge_file: MergeFile,
                 published: list[str]):
        self.manifest, self.spec, self.open_release, self.merge_file = manifest, spec, open_release, merge_file
        self.published = published
        self.bases: list[_Base] = []
        self.variants: list[Variant] = []
        self.tried_seed = False

    def reader(self, release: str) -> Reader:
        return self.open_release(release)

    def existing(self, release: str, read: Reader):
        """The manifest's own series on this release: its presence, or None when no variant is for it."""
        try:
            self.manifest.patches_for(release)
        except Refused:  # no patch for this version (pins and unreadable files are raised by judge)
            return None
        return on_release(self.manifest, self.spec, release, read)

    def seed(self, release: str) -> None:
        """No base yet: the nearest published release (outside the scope) whose variant applies."""
        self.tried_seed = True
        ranged = [r for r in self.published if any(p.matches_version(r) for p in self.manifest.patches)
                  and self.spec.contains(r) and not self.manifest.is_fixed_in(r)]
        ranked = sorted(ranged, key=lambda r: (Version(r) > Version(release), abs(_ordinal(self.published, r)
                                                                                   - _ordinal(self.published, release))))
        for candidate in ranked[:3]:
            note(f"looking for a base release: {self.manifest.id} on {self.spec.distribution} {candidate}")
            try:
                read = self.reader(candidate)
            except Unavailable:
                continue
            found = self.existing(candidate, read)
            if found is not None and found.found is not None and found.found.state == APPLICABLE:
                self.bases.append(_Base(release=candidate, plan=found.found.plan, label=_label(self.manifest, candidate)))
                return

    def nearest_base(self, release: str) -> _Base | None:
        if not self.bases and not self.tried_seed:
            self.seed(release)
        if not self.bases:
            return None
        here = Version(release)
        below = [b for b in self.bases if Version(b.release) < here]
        pool = below or self.bases
        return min(pool, key=lambda b: abs(_ordinal(self.published, b.release) - _ordinal(self.published, release)))

    def one(self, release: str) -> ReleasePort:
        first = on_release(self.manifest, self.spec, release, None)
        if first.why_not is not None:
            return ReleasePort(release=release, state=first.why_not.state, detail=first.why_not.message)
        try:
            read = self.reader(release)
        except Unavailable as exc:
            return ReleasePort(release=release, state=UNAVAILABLE, detail=exc.message)
        own = self.existing(release, read)
        if own is not None and own.found.state == APPLICABLE:
            label = _label(self.manifest, release)
            self.bases.append(_Base(release=release, plan=own.found.plan, label=label))
            return ReleasePort(release=release, state=APPLIES, variant=label, detail=_offsets(own.found.plan))
        if own is not None and own.found.state == CONTAINED:
            return self.contained(release, f"holds the post-image of {_label(self.manifest, release)}")
        for variant in reversed(self.variants):
            found = presence(variant.patch, read)
            if found.state == APPLICABLE:
                variant.releases.append(release)
                self.bases.append(_Base(release=release, plan=found.plan, label=variant.file))
                return ReleasePort(release=release, state=PORTED, variant=variant.file, base=variant.base,
                                   detail=f"the variant made on {variant.made_on} applies; {_offsets(found.plan)}")
            if found.state == CONTAINED:
                return self.contained(release, f"holds the post-image of {variant.file}")
        base = self.nearest_base(release)
        if base is None:
            return ReleasePort(release=release, state=CONFLICTS,
                               detail="no release in reach where a variant of this hotfix applies, to merge from")
        return self.merge(release, read, base)

    def contained(self, release: str, why: str) -> ReleasePort:
        return ReleasePort(release=release, state=FIXED_UPSTREAM, by_content=True,
                           detail=f"{self.spec.distribution} {release} already {why} (by content)")

    def merge(self, release: str, read: Reader, base: _Base) -> ReleasePort:
        note(f"merging {base.label} ({self.spec.distribution} {base.release}) into {release}")
        chunks: list[bytes] = []
        conflicts: list[PortConflict] = []
        by_words = 0
        for edit in base.plan.edits:
            ours = read(edit.path)
            after, found, words = _merge_edit(edit, ours, self.merge_file, base)
            by_words += words
            if found:
                conflicts += found
                continue
            before = ours.data if ours is not None else None
            broken = _breaks_python(edit.path, before, edit.after, after)
            if broken:
                return ReleasePort(release=release, state=CHECK_FAILED, base=base.release,
                                   detail=f"merged from {base.release}, but {broken}")
            if before != after and before is not None and after is not None:
                chunks.append(diff_texts(edit.path, before, after))
            elif before != after:
                mode = (ours.mode if ours is not None else edit.new_mode or 0o644) & 0o777
                chunks.append(file_diff(edit.path, before, after, mode))
        if conflicts:
            return ReleasePort(release=release, state=CONFLICTS, base=base.release, conflicts=tuple(conflicts),
                               detail=f"merging {base.label} from {base.release}: {_describe_conflicts(tuple(conflicts))}")
        if not chunks:
            return self.contained(release, f"holds every change of {base.label} (the merge changes nothing)")
        data = b"".join(chunks)
        variant = Variant(file=f"{self.manifest.id}/{release}.patch", data=data, made_on=release, base=base.release,
                          from_label=base.label, by_words=by_words)
        found = presence(variant.patch, read)
        if found.state != APPLICABLE:  # the diff of two contents always plans on the first one
            raise AssertionError(f"the ported variant for {release} does not plan: {found.detail}")
        problem = failed_check(self.manifest, _overlay(read, found.plan))
        if problem:
            return ReleasePort(release=release, state=CHECK_FAILED, base=base.release,
                               detail=f"merged from {base.release}, but {problem}")
        variant.releases.append(release)
        self.variants.append(variant)
        self.bases.append(_Base(release=release, plan=found.plan, label=variant.file))
        words = f", {by_words} block(s) merged by words" if by_words else ""
        return ReleasePort(release=release, state=PORTED, variant=variant.file, base=base.release,
                           detail=f"merged from {base.label} on {base.release}{words}")


def _syntax_error(path: str, data: bytes) -> str | None:
    try:
        compile(data, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        return f"{exc.msg} (line {exc.lineno})"
    except ValueError as exc:  # a NUL byte
        return str(exc)
    return None


def _breaks_python(path: str, ours: bytes | None, patched: bytes | None, merged: bytes | None) -> str | None:
    """A merged .py file that no longer parses, where both the release's and the patched base's file do."""
    if not path.endswith(".py") or merged is None or ours is None or patched is None:
        return None
    if _syntax_error(path, ours) or _syntax_error(path, patched):
        return None  # newer syntax than this Python reads: nothing to conclude
    problem = _syntax_error(path, merged)
    return f"{path} no longer parses as Python after the merge: {problem}" if problem else None


def _ordinal(published: list[str], release: str) -> int:
    ordered = sorted(set(published) | {release}, key=Version)
    return ordered.index(release)


def _label(manifest: Manifest, release: str) -> str:
    return ", ".join(p.label for p in manifest.patches_for(release))


def _offsets(plan: Plan) -> str:
    offsets = [f"{path} {p.header.split(' @@')[0]} @@ {p.offset:+d}" for path, p in plan.offsets]
    return f"offset {'; '.join(offsets)}" if offsets else "exact"


def variant_range(members: list[str], published: list[str]) -> str:
    """``>=first,<next`` over the published releases, with ``!=`` for any in between that is not a member."""
    ordered = sorted(set(published) | set(members), key=Version)
    first, last = min(members, key=Version), max(members, key=Version)
    after = [r for r in ordered if Version(r) > Version(last)]
    inside = [r for r in ordered if Version(first) <= Version(r) <= Version(last) and r not in members]
    clauses = [f">={first}", f"<{after[0]}" if after else f"<={last}", *(f"!={r}" for r in inside)]
    return ",".join(clauses)


def _narrowed(manifest: Manifest, variants: list[Variant]) -> dict[int, str]:
    """Existing patches whose range holds a release a new variant now covers: that release excluded."""
    out: dict[int, str] = {}
    for index, spec in enumerate(manifest.patches):
        taken = sorted({r for v in variants for r in v.releases if spec.matches_version(r)}, key=Version)
        if taken:
            clauses = [str(c) for c in SpecifierSet(spec.versions or "")] + [f"!={r}" for r in taken]
            out[index] = ",".join(sorted(clauses, key=lambda c: (c.startswith("!="), c)))
    return out


def port(manifest: Manifest, spec: TargetSpec, releases: list[str], *, published: list[str],
         open_release: OpenRelease) -> PortResult:
    """Judge and port ``manifest`` on each of ``releases``; see the module docstring."""
    porter = _Porter(manifest, spec, open_release, merge_file, published or releases)
    outcomes = []
    ordered = sorted(releases, key=Version)
    for index, release in enumerate(ordered, start=1):
        note(f"[{index}/{len(ordered)}] {manifest.id} on {spec.distribution} {release}")
        try:
            outcomes.append(porter.one(release))
        except Unavailable as exc:
            outcomes.append(ReleasePort(release=release, state=UNAVAILABLE, detail=exc.message))
    for variant in porter.variants:
        variant.versions = variant_range(variant.releases, published or releases)
    contained = [o.release for o in outcomes if o.state == FIXED_UPSTREAM and o.by_content]
    proposed = min(contained, key=Version) if contained and manifest.fixed_in is None else None
    return PortResult(releases=tuple(outcomes), variants=tuple(porter.variants),
                      narrowed=_narrowed(manifest, porter.variants), proposed_fixed_in=proposed)

