"""`hotfix new ID`: author a catalog entry (patches/ID/*.patch + manifests/ID.toml) with hashes and stats.

``--from-commit SHA --repo PATH``: the commit as ``git format-patch`` output (plus ``--add-patch`` files).
``--from-install PACKAGE``: the patch-package workflow: files edited by hand in an installed wheel,
diffed against the pristine bytes of the same release's wheel (``--wheel FILE`` or the cached / downloaded one).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Sequence

from vllm_hotfix.commands import new_drafts
from vllm_hotfix.commands.new_drafts import Draft, NewPatch
from vllm_hotfix_guard.core.diff import parse_patch
from vllm_hotfix_guard.errors import Refused, UsageError
from vllm_hotfix.catalog.model import ID_PATTERN
from vllm_hotfix.catalog.manifest import manifest_from_dict
from vllm_hotfix.catalog.manifest_text import toml_value
from vllm_hotfix_guard.core.data import load_toml
from vllm_hotfix_guard.output import emit_json, note, say
from vllm_hotfix_guard.txn.atomic import atomic_write
from vllm_hotfix_guard.paths import make_state_dir  # 0o755 whatever the umask


def run(*, hotfix_id: str, commit: str | None = None, repo: Path | None = None, exclude: Sequence[str] = (),
        add_patches: Sequence[Path] = (), from_install: str | None = None, python: str | None = None,
        from_release: str | None = None, base: str | None = None, split_by_file: bool = False,
        distribution: str | None = None, versions: str | None = None, out_dir: Path = Path("."),
        wheel: Path | None = None, include_applied: bool = False, dry_run: bool = False, as_json: bool = False) -> int:
    drafts, release_report = _drafts(hotfix_id, commit=commit, repo=repo, exclude=exclude, from_install=from_install,
                                     python=python, from_release=from_release, base=base,
                                     split_by_file=split_by_file, distribution=distribution, versions=versions,
                                     wheel=wheel, include_applied=include_applied)
    from vllm_hotfix.flow.hotfix import read_patch_file

    for offset, path in enumerate(add_patches, start=len(drafts[0].patches) + 1):
        data = read_patch_file(Path(path))  # a regular file, capped (inputs.read_patch_file)
        parse_patch(data, source=str(path))
        drafts[0].patches.append(NewPatch(f"{offset:04d}-{Path(path).name}", data, f"added from {Path(path).name}"))

    written = []
    for draft in drafts:
        manifest_path = Path(out_dir) / "manifests" / f"{draft.hotfix_id}.toml"
        if manifest_path.exists():
            raise Refused(f"{manifest_path} already exists; nothing was written",
                          hint="choose another id, or edit that manifest (raise its version) by hand")
        entries = [_patch_entry(draft.hotfix_id, p) for p in draft.patches]
        text = _render_manifest(draft.hotfix_id, draft.fields, entries)
        # Validate with the real loader before writing anything: a manifest we cannot load is never written.
        manifest_from_dict(load_toml(text.encode(), str(manifest_path)), str(manifest_path))
        written.append((draft, manifest_path, Path(out_dir) / "patches" / draft.hotfix_id, entries, text))
    if not dry_run:
        for draft, manifest_path, patch_dir, _, text in written:
            make_state_dir(patch_dir)
            make_state_dir(manifest_path.parent)
            for p in draft.patches:
                atomic_write(patch_dir / p.name, p.data)
            atomic_write(manifest_path, text.encode())  # last: the manifest only appears with its patches

    if as_json:
        hotfixes = [{"id": d.hotfix_id, "manifest": str(m), "dry_run": dry_run,
                     "patches": [{"file": str(pd / p.name), **{k: e[k] for k in ("md5", "sha256", "stats")}}
                                 for p, e in zip(d.patches, entries)]}
                    for d, m, pd, entries, _ in written]
        if release_report is None:
            emit_json(hotfixes[0])
        else:
            emit_json({**{k: v for k, v in release_report.items() if k != "lines"}, "dry_run": dry_run,
                       "hotfixes": hotfixes})
        return 0
    if release_report is not None:
        for line in release_report["lines"]:
            say(line)
    wrote = "would write" if dry_run else "wrote"
    for draft, manifest_path, patch_dir, entries, _ in written:
        say(f"{wrote} {manifest_path}")
        for p, e in zip(draft.patches, entries):
            st = e["stats"]
            files = f"{st['files']} file" + ("s" if st["files"] != 1 else "")
            say(f"{wrote} {patch_dir / p.name} ({files} +{st['insertions']}/-{st['deletions']})")
    if dry_run:
        say("dry run: nothing was written")
        return 0
    first = drafts[0].hotfix_id
    if commit is not None:
        where = " --root CHECKOUT"
    else:
        where = f" --python {python}" if python else (" --python PY" if from_release else "")
    note(f"try it: hotfix show {first} --catalog {out_dir} && hotfix apply {first} --catalog {out_dir}{where} "
         "--dry-run; then fill in [[signatures]] and [[confirm]] (the commented example at the end of the manifest), "
         "the description, and check it: hotfix check-catalog " + first + " --catalog " + str(out_dir))
    return 0


def _drafts(hotfix_id: str, *, commit, repo, exclude, from_install, python, from_release, base, split_by_file,
            distribution, versions, wheel, include_applied) -> tuple[list[Draft], dict | None]:
    """The drafts of the one source given (a commit, an edited install, a patch release), and a patch
    release's report (None for the others)."""
    if not ID_PATTERN.fullmatch(hotfix_id):
        raise UsageError(f"hotfix id {hotfix_id!r}: use lowercase letters, digits and '-' (e.g. mamba-align-block-size)")
    if sum(x is not None for x in (commit, from_install, from_release)) != 1:
        raise UsageError("give exactly one of --from-commit SHA (with --repo PATH), --from-install PACKAGE or "
                         "--from-release DIST==X.Y.Z")
    if from_release is None and (base is not None or split_by_file):
        raise UsageError("--base and --split-by-file go with --from-release")
    if include_applied and from_install is None:
        raise UsageError("--include-applied goes with --from-install")
    if commit is not None:
        patches, fields = new_drafts.from_commit(commit, repo, exclude, distribution, versions)
        return [Draft(hotfix_id, patches, fields)], None
    elif from_install is not None:
        patches, fields = new_drafts.from_install(from_install, python, versions, wheel, include_applied)
        return [Draft(hotfix_id, patches, fields)], None
    else:
        if versions is not None:
            raise UsageError("--from-release makes a hotfix for ==BASE; --versions does not apply")
        return new_drafts.from_release(hotfix_id, from_release, base, split_by_file=split_by_file)


def _patch_entry(hotfix_id: str, patch: NewPatch) -> dict[str, Any]:
    stats = parse_patch(patch.data, source=patch.name).stats  # before exclude, as the loader checks them
    entry: dict[str, Any] = {"file": f"{hotfix_id}/{patch.name}", "strip": 1}
    if patch.exclude:
        entry["exclude"] = list(patch.exclude)
    entry["md5"] = hashlib.md5(patch.data, usedforsecurity=False).hexdigest()
    entry["sha256"] = hashlib.sha256(patch.data).hexdigest()
    entry["stats"] = {"files": stats.files, "insertions": stats.insertions, "deletions": stats.deletions}
    entry["description"] = patch.description
    return entry


# --- manifest text ------------------------------------------------------------------------------------

# The commented example at the end of every manifest `new` writes: uncommented (drop the leading "# "), it is
# valid and in the current signature form (tiers and roles; tests/commands/test_new.py loads it that way).
SIGNATURE_TEMPLATE = """\
# How `hotfix doctor` recognises the crash, and how a user confirms it. Uncomment, edit, and run
# `hotfix check-catalog` (it refuses signatures that can never name the fix). tier: specific names the
# fix (a line only this bug writes, counted where a name faults), condition makes a generic error
# "possible" (the setting the bug needs), generic alone is no candidate, veto rules it out. role: where
# a line counts: fault-report (debugger / sanitizer), traceback (a frame, or the source line under it),
# error-line (the log's own error lines), first-error (a process's first error and the lines after
# it), config, context (anywhere; never for a specific one).
#
# [[signatures]]
# pattern = 'the_faulting_kernel_name'
# role = ["fault-report", "traceback"]
# tier = "specific"
# explain = "the faulting kernel is the one this patch fixes"
#
# [[signatures]]
# pattern = "the start-up line of the setting the bug needs"
# role = "config"
# tier = "condition"
# explain = "the bug happens only with this setting on"
#
# [[signatures]]
# pattern = 'CUDA error: an illegal memory access was encountered'
# role = "first-error"
# tier = "generic"
# explain = "the crash every bug of the kind shows (generic alone)"
#
# [[confirm]]
# step = "restart with CUDA_LAUNCH_BLOCKING=1 and send the request that crashed again"
# shows = "the traceback stops at the_faulting_kernel_name: give doctor that log"
"""


def _render_manifest(hotfix_id: str, fields: dict[str, Any], patches: list[dict[str, Any]]) -> str:
    lines = [f"# {fields['comment']}",
             "# Fill in [[signatures]] and [[confirm]] (the commented example at the end) and fixed_in when known.",
             "schema = 1", f"id = {toml_value(hotfix_id)}", "version = 1",
             f"title = {toml_value(fields['title'])}", f"description = {toml_value(fields['description'])}",
             "supersedes = []"]
    lines += [f"{key} = {toml_value(value)}" for key, value in fields.get("top", {}).items()]
    for table, rows in (("references", fields["references"]), ("targets", fields["targets"]), ("patches", patches)):
        for row in rows:
            lines += ["", f"[[{table}]]"] + [f"{k} = {toml_value(v)}" for k, v in row.items()]
    return "\n".join(lines) + "\n\n" + SIGNATURE_TEMPLATE
