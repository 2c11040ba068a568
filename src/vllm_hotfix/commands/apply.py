"""`hotfix apply`: a raw diff on a directory (``--patch FILE --root DIR``); catalog hotfixes come later."""

from __future__ import annotations

import sys
from pathlib import Path

from vllm_hotfix import paths
from vllm_hotfix.core.apply import FileEdit, Plan, plan_patch
from vllm_hotfix.core.diff import DiffStat, Patch, parse_patch
from vllm_hotfix.errors import DoesNotApply, HotfixError, InvalidInput, UsageError
from vllm_hotfix.output import emit_json, note, say
from vllm_hotfix.parallel_plan import ForkedHalf
from vllm_hotfix.target.tree import Tree
from vllm_hotfix.txn.journal import JOURNAL, commit, recover_target
from vllm_hotfix.txn.lock import target_lock

LETTERS = {"modify": "M", "create": "A", "delete": "D", "rename": "R", "mode": "M"}
PROGRESS_MIN_FILES = 50


def run(**options) -> int:
    if options.get("patch_file") and options.get("root") and not options.get("hotfix_id"):
        return apply_raw(
            options["patch_file"], options["root"],
            strip=1 if options.get("strip") is None else options["strip"],
            reverse=bool(options.get("reverse")), dry_run=bool(options.get("dry_run")),
            as_json=bool(options.get("as_json")),
        )
    return apply_hotfix(**options)


def apply_hotfix(**options) -> int:
    """A catalog hotfix (ID[@VERSION]) or an ad-hoc --patch on an installed package (--python --package)."""
    from vllm_hotfix import operations as ops
    from vllm_hotfix.catalog import Catalog, parse_ref
    from vllm_hotfix.target.locate import locate_package

    dry_run, as_json = bool(options.get("dry_run")), bool(options.get("as_json"))
    if options.get("reverse"):
        raise UsageError("--reverse is for a raw --patch with --root; to undo a hotfix use `hotfix rollback ID`")
    if options.get("patch_file"):
        if options.get("hotfix_id"):
            raise UsageError("give either a hotfix ID or --patch FILE, not both",
                             hint="a manifest's separately distributed file goes with --patch-file")
        if not options.get("package"):
            raise UsageError("--patch with --python needs --package NAME (the import name, e.g. vllm)")
        hotfix = ops.adhoc_hotfix(options["patch_file"], hotfix_id=options.get("adhoc_id"),
                                  strip=1 if options.get("strip") is None else options["strip"],
                                  package=options["package"])
        target, spec = locate_package(options["package"], options.get("python")), None
    else:
        if not options.get("hotfix_id"):
            raise UsageError("name a hotfix (`hotfix list` shows them) or give --patch FILE")
        hotfix_id, version = parse_ref(options["hotfix_id"])
        manifest = Catalog.load(options.get("catalogs") or ()).get(hotfix_id, version)
        if manifest.kind == "advisory":
            manifest.patches_for(None)  # refuses (exit 3, "is an advisory"), before any target is resolved
        target, spec = ops.resolve_manifest_target(manifest, python=options.get("python"), root=options.get("root"))
        ops.check_applicable(manifest, spec, target)
        ops.check_requires(manifest, ops.parse_checkouts(options.get("checkouts") or ()))
        hotfix = ops.catalog_hotfix(manifest, target, patch_files=options.get("patch_files") or (),
                                    upstream_repo=options.get("upstream_repo"))
    for warning in target.warnings:
        note(warning)
    outcome = ops.apply(hotfix, target, spec, dry_run=dry_run)
    _report_hotfix(outcome, as_json=as_json)
    return 0


def _report_hotfix(outcome, *, as_json: bool) -> None:
    from vllm_hotfix.operations import target_option, target_summary

    proposal = outcome.proposal
    hotfix, target = proposal.hotfix, proposal.target
    edits = () if proposal.already else proposal.plan.edits
    if as_json:
        emit_json({
            "id": hotfix.id, "version": hotfix.version, "source": hotfix.source,
            "target": target_summary(target),
            "applied": not outcome.dry_run and not proposal.already,
            "dry_run": outcome.dry_run, "already_applied": proposal.already,
            "superseded": proposal.superseded.version if proposal.superseded else None,
            "files": [_edit_json(e) for e in edits],
        })
        return
    where = f"{target.distribution or target.package} {target.version or ''} at {target.root}".replace("  ", " ")
    if proposal.already:
        say(f"already applied: {hotfix.ref} on {where}; nothing to do")
        return
    if proposal.superseded is not None:
        say(f"upgrade: {hotfix.id}@{proposal.superseded.version} is reversed and {hotfix.ref} applied, in one transaction")
    for edit in edits:
        say(_describe(edit))
    if outcome.dry_run:
        say(f"dry run: would apply {hotfix.ref} to {where}: {len(edits)} file(s); nothing was written")
    else:
        say(f"applied {hotfix.ref} to {where}: {len(edits)} file(s), all-or-nothing; "
            f"check with `hotfix verify {hotfix.id} {target_option(target)}`")


def apply_raw(patch_file: Path, root: Path, *, strip: int, reverse: bool, dry_run: bool, as_json: bool) -> int:
    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"--root {root}: no such directory")
    data = _read_bytes(patch_file)
    child = ForkedHalf.start(data, strip=strip, source=str(patch_file), root=root)
    try:
        patch, child = _parse_raw(data, strip, str(patch_file), child)
        state_dir = paths.target_state_dir(root)
        if dry_run:
            if (paths.journal_dir(state_dir) / JOURNAL).exists():
                note(f"an interrupted apply on {root} was not recovered yet; run `hotfix recover --root {root}`")
            plan, stats, already = _plan_raw(patch, data, strip, child, Tree(root), reverse)
        else:
            with target_lock(state_dir):
                recover_target(root)
                tree = Tree(root)
                plan, stats, already = _plan_raw(patch, data, strip, child, tree, reverse)
                if not already:
                    commit(root, plan, journal_dir=paths.journal_dir(state_dir), tree=tree)
    finally:
        if child is not None:
            child.cancel()
    _report(plan, patch.source, stats, dry_run=dry_run, already=already, as_json=as_json)
    return 0


def _read_bytes(patch_file: Path) -> bytes:
    try:
        return Path(patch_file).read_bytes()
    except OSError as exc:
        raise InvalidInput(f"{patch_file}: cannot read: {exc.strerror}") from None


def _parse_raw(data: bytes, strip: int, source: str, child: ForkedHalf | None) -> tuple[Patch, ForkedHalf | None]:
    """The whole patch, or with a child: the first half, once the child has parsed the second.
    When a half does not parse, the whole diff is parsed here, for the sequential error message."""
    if child is not None:
        try:
            first = parse_patch(child.first_half, strip=strip, source=source)
        except HotfixError:
            first = None
        if first is not None and child.child_parsed():
            return first, child
        child.cancel()
    return parse_patch(data, strip=strip, source=source), None


def _plan_raw(patch: Patch, data: bytes, strip: int, child: ForkedHalf | None, tree: Tree,
              reverse: bool) -> tuple[Plan, DiffStat, bool]:
    """``_plan`` of the whole diff. With a child, ``patch`` is the first half and the child plans the
    rest; any trouble there means: parse and plan the whole diff here, sequentially."""
    if child is not None:
        merged = child.finish(patch, tree, _progress_reader(tree, len(patch.files)), reverse=reverse)
        if merged is not None:
            return merged[0], merged[1], False
        patch = parse_patch(data, strip=strip, source=patch.source)
    plan, already = _plan(patch, tree, reverse)
    return plan, patch.stats, already


def _plan(patch: Patch, tree: Tree, reverse: bool) -> tuple[Plan, bool]:
    """The plan in the asked direction; if only the other direction applies, (that plan, True): already applied."""
    try:
        return plan_patch(patch, _progress_reader(tree, len(patch.files)), reverse=reverse), False
    except DoesNotApply as forward_error:
        try:
            return plan_patch(patch, tree.read, reverse=not reverse), True
        except DoesNotApply:
            raise forward_error from None


def _progress_reader(tree: Tree, total: int):
    """``tree.read`` that draws "planning k/N" on a terminal for large patches."""
    if total < PROGRESS_MIN_FILES or not sys.stderr.isatty():
        return tree.read
    seen: set[str] = set()

    def read(relpath: str):
        seen.add(relpath)
        if len(seen) % 25 == 0 or len(seen) == total:
            sys.stderr.write(f"\rhotfix: planning {len(seen)}/{total} files")
            if len(seen) >= total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        return tree.read(relpath)

    return read


def _offsets(edit: FileEdit) -> list[int]:
    return [p.offset for p in edit.placements]


def _describe(edit: FileEdit) -> str:
    name = f"{edit.old_path} -> {edit.path}" if edit.action == "rename" else edit.path
    hunks = len(edit.placements)
    details = [f"{hunks} hunk{'s' if hunks != 1 else ''}"] if hunks else []
    if edit.new_mode is not None and edit.old_mode is not None and edit.old_mode & 0o777 != edit.new_mode:
        details.append(f"mode {edit.old_mode & 0o777:o} -> {edit.new_mode:o}")
    for placement in edit.placements:
        if placement.offset:
            at = placement.header.split(" @@")[0] + " @@"
            details.append(f"offset {placement.offset:+d} at {at}")
    return f"{LETTERS.get(edit.action, '?')} {name}" + (f" ({', '.join(details)})" if details else "")


def _edit_json(edit: FileEdit) -> dict:
    return {"path": edit.path, "action": edit.action, "old_path": edit.old_path,
            "hunks": len(edit.placements), "offsets": _offsets(edit)}


def _report(plan: Plan, source: str, stats: DiffStat, *, dry_run: bool, already: bool, as_json: bool) -> None:
    if as_json:
        emit_json({
            "applied": not dry_run and not already,
            "dry_run": dry_run,
            "already_applied": already,
            "files": [] if already else [_edit_json(e) for e in plan.edits],
        })
        return
    if already and plan.reverse:
        say(f"already applied: {source} (its reverse applies cleanly); nothing to do")
        return
    if already:
        say(f"already reversed: {source} is not in the tree (it applies forward cleanly); nothing to do")
        return
    lines = [_describe(edit) for edit in plan.edits]
    summary = f"{len(plan.edits)} file(s), +{stats.insertions} -{stats.deletions}"
    if plan.reverse:
        summary += ", reversed"
    if dry_run:
        lines.append(f"dry run: would change {summary}; nothing was written")
    else:
        lines.append(f"applied {summary} (all-or-nothing)")
    say("\n".join(lines))
