"""`hotfix contains`: is this fix in this install (or in these published releases), by content?

No rule of its own. A catalog hotfix is judged by ``applicability`` (its range; ``fixed_in`` -> the
release *contains* the fix, what status calls fixed-upstream), then by the record (``status.Survey``:
recorded and in effect -> ``applied``), then by ``core.presence`` on the files (contained /
applicable / partly / conflicts, the rule `status` reads an unrecorded hotfix with). A raw diff has
only the last two questions. On a published release the files are read from its wheel.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from vllm_hotfix.catalog.model import Manifest, TargetSpec
from vllm_hotfix_guard.core.hunk_apply import Reader
from vllm_hotfix_guard.core.diff import Patch
from vllm_hotfix.core.presence import APPLICABLE, CONFLICTS, CONTAINED, PARTLY, Presence, presence
from vllm_hotfix_guard.core.verdict import APPLIED, FIXED_UPSTREAM, INTERRUPTED, NOT_APPLICABLE, STALE_BYTECODE
from vllm_hotfix_guard.errors import Refused, Unavailable
from vllm_hotfix.flow.applicability import Inapplicable, applicability
from vllm_hotfix.flow.hotfix import catalog_hotfix
from vllm_hotfix.flow.releases import on_release
from vllm_hotfix.flow.survey import Survey
from vllm_hotfix.install.locate import Target
from vllm_hotfix.install.tree import Tree

UNAVAILABLE = "unavailable"
ANSWERS = (CONTAINED, APPLIED, APPLICABLE, PARTLY, CONFLICTS, NOT_APPLICABLE, STALE_BYTECODE)
IN = frozenset({CONTAINED, APPLIED})


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """One answer (a word of ANSWERS, or UNAVAILABLE for a release the index could not give) and why."""

    state: str
    detail: str
    release: str | None = None
    by: str = "content"  # how it was decided: content | release (fixed_in / range) | record
    found: Presence | None = None

    @property
    def fix_is_in(self) -> bool:
        return self.state in IN

    def to_json(self) -> dict:
        return {"release": self.release, "state": self.state, "detail": self.detail, "by": self.by,
                "files": [f.to_json() for f in self.found.files] if self.found else []}


def _declared(why_not: Inapplicable, release: str | None) -> Answer:
    if why_not.state == FIXED_UPSTREAM:
        return Answer(state=CONTAINED, detail=why_not.message, release=release, by="release")
    return Answer(state=NOT_APPLICABLE, detail=why_not.message, release=release, by="release")


def _content(found: Presence, release: str | None) -> Answer:
    return Answer(state=found.state, detail=found.detail, release=release, found=found)


def hotfix_on_target(manifest: Manifest, version: str | None, survey: Survey) -> tuple[Target, Answer]:
    """A catalog hotfix (``version`` as the user named it, None: the newest) on ``survey``'s target."""
    target, spec = survey.resolver.for_manifest(manifest)
    why_not = applicability(manifest, spec, target)
    if why_not is not None:
        return target, _declared(why_not, target.version)
    (status,) = survey.named([(manifest.id, version)])
    if status.state == INTERRUPTED:
        raise Refused(f"{manifest.id}: {status.detail}", hint=status.advice)
    if status.recorded and status.state == APPLIED:
        return target, Answer(state=APPLIED, detail=f"recorded here and in effect: {status.detail}",
                              release=target.version, by="record")
    if status.recorded and status.state == STALE_BYTECODE:  # the source holds it, the code Python runs does not
        return target, Answer(state=STALE_BYTECODE, detail=status.detail, release=target.version, by="record")
    hotfix = catalog_hotfix(manifest, target)
    return target, _content(presence(hotfix.series, Tree(target.root).read), target.version)


def patch_on_target(patch: Patch, version: str, root: Path, survey: Survey, release: str | None = None) -> Answer:
    """A raw diff on the files under ``root``; ``applied`` when a recorded ad-hoc apply of these very bytes
    (its version is their sha256 prefix, as `apply --patch` records it) is in effect there."""
    for status in survey.everything(with_catalog=False):
        if status.recorded and str(status.version) == version and Path(status.target) == Path(root):
            if status.state == APPLIED:
                return Answer(state=APPLIED, detail=f"recorded here as {status.id} and in effect", release=release,
                              by="record")
    return _content(presence(patch, Tree(root).read), release)


def hotfix_on_release(manifest: Manifest, spec: TargetSpec, release: str, open_release: Callable[[str], Reader]) -> Answer:
    """A catalog hotfix on a published release (the same two rules, the files from its wheel)."""
    first = on_release(manifest, spec, release, None)
    if first.why_not is not None:
        return _declared(first.why_not, release)
    try:
        manifest.patches_for(release)
    except Refused as exc:
        return Answer(state=NOT_APPLICABLE, detail=f"{exc.message} (`hotfix port {manifest.id}` makes one)",
                      release=release, by="release")
    try:
        read = open_release(release)
    except Unavailable as exc:
        return Answer(state=UNAVAILABLE, detail=exc.message, release=release, by="index")
    return _content(on_release(manifest, spec, release, read).found, release)


def patch_on_release(patch: Patch, release: str, open_release: Callable[[str], Reader]) -> Answer:
    try:
        read = open_release(release)
    except Unavailable as exc:
        return Answer(state=UNAVAILABLE, detail=exc.message, release=release, by="index")
    return _content(presence(patch, read), release)

