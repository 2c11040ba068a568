"""Is a patch's change in these files? The one content rule (pure: a patch and a reader in, a word out).

``presence`` first asks ``apply.detect`` (the rule `apply` acts on): the series plans forward ->
APPLICABLE, only its reverse plans -> CONTAINED (the files already hold the post-image). Otherwise
each file, then each hunk of a modified file, is located on its own: a hunk whose new side is found
is *present*, one whose old side is found is *missing*, one found nowhere *conflicts*. Some present
-> PARTLY; none -> CONFLICTS. `hotfix contains`, `hotfix port`, `check-catalog` and `status` (an
unrecorded hotfix: not-applied / applied by hand / drifted) all take their answer from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_hotfix_guard.core.hunk_apply import Plan, Reader, apply_hunks, detect
from vllm_hotfix_guard.core.diff import FilePatch, Patch, reverse_patch
from vllm_hotfix_guard.errors import DoesNotApply

APPLICABLE = "applicable"  # the change is not there and the patch applies as it is
CONTAINED = "contained"    # the files already hold the patch's post-image (upstream merged it, or applied by hand)
PARTLY = "partly"          # some files or hunks hold the post-image, the rest does not apply
CONFLICTS = "conflicts"    # nothing of it is there and it does not apply

WORDS = (APPLICABLE, CONTAINED, PARTLY, CONFLICTS)

# per hunk
PRESENT, MISSING, CONFLICT = "present", "missing", "conflict"


@dataclass(frozen=True, slots=True, kw_only=True)
class HunkPresence:
    """One hunk of one file: is its new side there (present), its old side (missing), or neither?"""

    header: str  # '@@ -104,9 +104,21 @@'
    state: str   # PRESENT | MISSING | CONFLICT
    line: int | None = None  # 1-based line where the side that matched starts
    why: str = ""  # for CONFLICT: the forward error, worded like `git apply --check -v`

    def to_json(self) -> dict:
        return {"hunk": self.header, "state": self.state, "line": self.line, "detail": self.why}


@dataclass(frozen=True, slots=True, kw_only=True)
class FilePresence:
    """One file of the patch: its own word (one of WORDS) and, for a modified file, its hunks."""

    path: str
    state: str
    hunks: tuple[HunkPresence, ...] = ()
    why: str = ""

    def to_json(self) -> dict:
        return {"path": self.path, "state": self.state, "detail": self.why, "hunks": [h.to_json() for h in self.hunks]}


@dataclass(frozen=True, slots=True, kw_only=True)
class Presence:
    """The word for a whole patch on these files, why, per file, and the plan that worked (if any)."""

    state: str
    detail: str
    files: tuple[FilePresence, ...] = ()
    plan: Plan | None = None  # forward plan (APPLICABLE) or reverse plan (CONTAINED)
    error: DoesNotApply | None = None  # the forward error otherwise

    def to_json(self) -> dict:
        return {"state": self.state, "detail": self.detail, "files": [f.to_json() for f in self.files]}


def _hunk_presence(path: str, data: bytes, f: FilePatch) -> tuple[HunkPresence, ...]:
    backwards = reverse_patch(Patch((f,), "")).files[0].hunks
    out = []
    for hunk, reverse in zip(f.hunks, backwards):
        try:
            _, (placed,) = apply_hunks(path, data, (hunk,))
            out.append(HunkPresence(header=hunk.range_header, state=MISSING, line=placed.actual))
            continue
        except DoesNotApply as forward:
            why = forward.message
        try:
            _, (placed,) = apply_hunks(path, data, (reverse,))
            out.append(HunkPresence(header=hunk.range_header, state=PRESENT, line=placed.actual))
        except DoesNotApply:
            out.append(HunkPresence(header=hunk.range_header, state=CONFLICT, why=why))
    return tuple(out)


def _file_presence(f: FilePatch, read: Reader) -> FilePresence:
    found = detect(Patch((f,), ""), read)
    if found.state == "applicable":
        return FilePresence(path=f.path, state=APPLICABLE)
    if found.state == "applied":
        return FilePresence(path=f.path, state=CONTAINED)
    why = found.error.message if found.error else "does not apply"
    current = read(f.old_path) if f.kind == "modify" and f.old_path else None
    if current is None or not f.hunks:
        return FilePresence(path=f.path, state=CONFLICTS, why=why)
    hunks = _hunk_presence(f.old_path, current.data, f)
    present = sum(h.state == PRESENT for h in hunks)
    return FilePresence(path=f.path, state=PARTLY if present else CONFLICTS, hunks=hunks, why=why)


def presence(patch: Patch, read: Reader) -> Presence:
    """APPLICABLE / CONTAINED / PARTLY / CONFLICTS for ``patch`` on the files ``read`` gives.

    ``Refused`` (an unsafe path, a symlink) is raised as by planning: that is not an answer about content.
    """
    found = detect(patch, read)
    if found.state == "applicable":
        return Presence(state=APPLICABLE, detail="the patch applies; its change is not in these files",
                        plan=found.plan)
    if found.state == "applied":
        return Presence(state=CONTAINED, detail="the files already hold the patch's post-image (its reverse applies)",
                        plan=found.plan)
    files = tuple(_file_presence(f, read) for f in patch.files)
    present = total = 0
    for f, found_file in zip(patch.files, files):
        count = len(f.hunks) or 1
        total += count
        if found_file.state == CONTAINED:
            present += count
        elif found_file.state == PARTLY:
            present += sum(h.state == PRESENT for h in found_file.hunks)
    error = found.error
    why = error.message if error else "the patch does not apply"
    if present:
        return Presence(state=PARTLY, files=files, error=error,
                        detail=f"{present} of {total} hunk(s) hold the post-image; the rest does not apply: {why}")
    return Presence(state=CONFLICTS, files=files, error=error, detail=why)
