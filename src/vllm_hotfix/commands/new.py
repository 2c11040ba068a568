"""`hotfix new ID`: author a catalog entry (patches/ID/*.patch + manifests/ID.toml) with hashes and stats.

``--from-commit SHA --repo PATH``: the commit as ``git format-patch`` output (plus ``--add-patch`` files).
``--from-install PACKAGE``: the patch-package workflow: files edited by hand in an installed wheel,
diffed against the pristine bytes of the same release's wheel (``--wheel FILE`` or the cached / downloaded one).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from vllm_hotfix.core.diff import exclude_paths, parse_patch
from vllm_hotfix.core.render import file_diff
from vllm_hotfix.errors import InvalidInput, Refused, UsageError
from vllm_hotfix.catalog.model import ID_PATTERN
from vllm_hotfix.catalog.manifest import manifest_from_dict
from vllm_hotfix.catalog.manifest_text import toml_value
from vllm_hotfix.core.data import load_toml
from vllm_hotfix.output import emit_json, note, quote_path, say
from vllm_hotfix.install.record import data_digest
from vllm_hotfix.txn.atomic import atomic_write
from vllm_hotfix.paths import make_state_dir  # 0o755 whatever the umask


@dataclass(frozen=True)
class NewPatch:
    """A patch `hotfix new` made from hand edits, with the files it touches."""

    name: str  # file name under patches/ID/
    data: bytes
    description: str
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True)
class Draft:
    """One manifest `hotfix new` is about to write, with its patches (validated before anything is written)."""

    hotfix_id: str
    patches: list[NewPatch]
    fields: dict[str, Any]


def run(*, hotfix_id: str, commit: str | None = None, repo: Path | None = None, exclude: Sequence[str] = (),
        add_patches: Sequence[Path] = (), from_install: str | None = None, python: str | None = None,
        from_release: str | None = None, base: str | None = None, split_by_file: bool = False,
        distribution: str | None = None, versions: str | None = None, out_dir: Path = Path("."),
        wheel: Path | None = None, include_applied: bool = False, dry_run: bool = False, as_json: bool = False) -> int:
    if not ID_PATTERN.fullmatch(hotfix_id):
        raise UsageError(f"hotfix id {hotfix_id!r}: use lowercase letters, digits and '-' (e.g. mamba-align-block-size)")
    if sum(x is not None for x in (commit, from_install, from_release)) != 1:
        raise UsageError("give exactly one of --from-commit SHA (with --repo PATH), --from-install PACKAGE or "
                         "--from-release DIST==X.Y.Z")
    if from_release is None and (base is not None or split_by_file):
        raise UsageError("--base and --split-by-file go with --from-release")
    if include_applied and from_install is None:
        raise UsageError("--include-applied goes with --from-install")
    release_report = None
    if commit is not None:
        patches, fields = _from_commit(commit, repo, exclude, distribution, versions)
        drafts = [Draft(hotfix_id, patches, fields)]
    elif from_install is not None:
        patches, fields = _from_install(from_install, python, versions, wheel, include_applied)
        drafts = [Draft(hotfix_id, patches, fields)]
    else:
        if versions is not None:
            raise UsageError("--from-release makes a hotfix for ==BASE; --versions does not apply")
        drafts, release_report = _from_release(hotfix_id, from_release, base, split_by_file=split_by_file)
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


# --- from a commit ----------------------------------------------------------------------------------

def _slug(subject: str, limit: int = 52) -> str:
    subject = re.sub(r"^(\s*\[[^\]]*\])+", "", subject)
    subject = re.sub(r"\(#\d+\)\s*$", "", subject)
    slug = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    if len(slug) > limit:
        slug = slug[:limit].rsplit("-", 1)[0]
    return slug or "patch"


def _commit_url(remote: str | None, sha: str) -> str | None:
    if not remote:
        return None
    remote = remote.strip()
    found = re.fullmatch(r"(?:https?://|git@|ssh://git@)([^/:]+)[/:](.+?)(?:\.git)?/?", remote)
    if found is None:
        return None
    return f"https://{found.group(1)}/{found.group(2)}/commit/{sha}"


def _from_commit(commit: str, repo: Path | None, exclude: Sequence[str], distribution: str | None,
                 versions: str | None) -> tuple[list[NewPatch], dict[str, Any]]:
    from vllm_hotfix.catalog.upstream import commit_info, format_commit_patch

    if repo is None:
        raise UsageError("--from-commit needs --repo PATH (a local clone that has the commit)")
    if not distribution or not versions:
        raise UsageError("--from-commit needs --target DIST and --versions SPEC (e.g. --target vllm --versions '>=0.29,<0.32')")
    info = commit_info(repo, commit)
    data = format_commit_patch(repo, info["sha"])
    patch = parse_patch(data, source=f"commit {info['sha'][:7]}")
    for glob in exclude:
        if len(exclude_paths(patch, [glob]).files) == len(patch.files):
            note(f"--exclude {glob}: matches no file of commit {info['sha'][:7]}")
    short = info["sha"][:7]
    url = _commit_url(info["remote"], info["sha"]) or f"{Path(repo).resolve().as_uri()}#{info['sha']}"
    fields = {
        "title": info["subject"],
        "description": info["body"] or info["subject"],
        "references": [{"kind": "commit", "url": url, "title": f"{short}: {info['subject']}"}],
        "targets": [{"distribution": distribution, "versions": versions}],
        "comment": f"Written by `hotfix new` from commit {info['sha']} of {Path(repo).resolve()}.",
    }
    description = f"upstream commit {short}" + (f"; {', '.join(exclude)} excluded" if exclude else "")
    return [NewPatch(f"0001-{short}-{_slug(info['subject'])}.patch", data, description, tuple(exclude))], fields


# --- from an installed wheel edited by hand -----------------------------------------------------------

def _from_install(package: str, python: str | None, versions: str | None,
                  wheel: Path | None, include_applied: bool = False) -> tuple[list[NewPatch], dict[str, Any]]:
    from vllm_hotfix.flow.resolve import Resolver
    from vllm_hotfix.install.record import audit, read_record
    from vllm_hotfix.catalog.upstream import WheelReader, published_wheel

    target = Resolver(python).package(package)
    if target.kind != "wheel" or not target.has_record or not target.distribution or not target.version:
        raise Refused(f"{package} in {target.package_dir} is a {target.kind} install without a pip RECORD: "
                      "cannot tell which files were edited",
                      hint="for a git checkout, commit your edits and use --from-commit SHA --repo PATH")
    entries = read_record(target.dist_info)
    top = target.package_dir.relative_to(target.root).parts[0]
    report = audit(target.root, entries, top_dirs=[top])
    changed = sorted((d for d in report.differences if d.path.split("/", 1)[0] == top), key=lambda d: d.path)
    if not changed:
        raise Refused(f"{target.distribution} {target.version} in {target.root}: no file differs from RECORD",
                      hint="edit the installed files first (hotfix where PACKAGE shows them), then run this again")
    tops, owners = _recorded_tops(target, [d.path for d in changed], include_applied)
    changed = [d for d in changed if d.path not in tops or tops[d.path] != _read(target.root, d.path)]
    if not changed:
        raise Refused(f"{target.distribution} {target.version} in {target.root}: the files that differ from RECORD "
                      f"hold exactly what the recorded hotfixes ({', '.join(owners)}) put there: no edit of its own",
                      hint="edit the installed files first, or fold the recorded hotfixes in with --include-applied")
    wheel_path = Path(wheel) if wheel else published_wheel(target.distribution, target.version)
    chunks = []
    with WheelReader(wheel_path) as pristine:
        for difference in changed:
            chunk = _diff_installed(target.root, difference, entries.get(difference.path), pristine, wheel_path,
                                    base=tops.get(difference.path, _PRISTINE))
            if chunk:
                chunks.append(chunk)
    if not chunks:
        raise Refused(f"{target.distribution} {target.version}: only binary files differ from RECORD; nothing to diff")
    paths = [d.path for d in changed]
    data = b"".join(chunks)
    label = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    fields = {
        "title": f"local edits to {target.distribution} {target.version}: {label}",
        "description": f"Made by `hotfix new --from-install {package}` from files edited by hand in {target.root}.",
        "references": [],
        "targets": [{"distribution": target.distribution, "package": target.package,
                     "versions": versions or f"=={target.version}"}],
        "comment": f"Written by `hotfix new --from-install` against {wheel_path.name}.",
    }
    if tops:  # the new edit goes on top of the recorded series: it names the hotfixes it must stay above
        below = sorted({h for h in owners})
        fields["top"] = {"after": below}
        fields["description"] += f" It holds only the edits made on top of the recorded hotfixes {', '.join(below)}."
    return [NewPatch(f"{target.version}.patch", data, f"edits to {label}")], fields


_PRISTINE = object()  # _diff_installed's default base: the file as the wheel has it


def _read(root: Path, path: str) -> bytes | None:
    from vllm_hotfix.install.tree import Tree

    found = Tree(root).read(path)
    return found.data if found is not None else None


def _recorded_tops(target: Any, paths: list[str], include_applied: bool) -> tuple[dict[str, bytes | None], list[str]]:
    """(path -> the bytes the target's recorded series leaves in it, the recorded hotfixes touching those
    paths) for the changed paths a record covers: a new hotfix made from the install is the difference
    from there, on top of the series (txn/derive.py gives every state, each checked against the record).
    With ``include_applied`` the recorded changes are folded in (said on stderr) and nothing is subtracted."""
    from vllm_hotfix.install.tree import Tree
    from vllm_hotfix.txn.derive import Derivation
    from vllm_hotfix.txn.state import TargetState

    state = TargetState.for_root(target.root)
    derivation = Derivation(state, Tree(target.root).read, target.root)
    covered = [p for p in paths if p in derivation.chains]
    owners = list(dict.fromkeys(s[0] for p in covered for s in derivation.chains[p]))
    if not covered:
        return {}, []
    if include_applied:
        note(f"--include-applied: the patch also holds the changes of the recorded hotfixes {', '.join(owners)} "
             f"(in {', '.join(covered)})")
        return {}, owners
    tops = {}
    for path in covered:
        found = Tree(target.root).read(path)
        try:
            tops[path] = derivation.derive(path, found, None)[-1]
        except (Refused, InvalidInput) as exc:
            raise Refused(f"{path}: cannot derive what the recorded series ({', '.join(owners)}) leaves in it: "
                          f"{exc.message}", hint="fold the recorded hotfixes in with --include-applied") from None
    return tops, owners


def _diff_installed(root: Path, difference: Any, entry: Any, pristine: Any, wheel_path: Path,
                    base: Any = _PRISTINE) -> bytes | None:
    path = difference.path
    before = pristine(path)
    if entry is not None and before is not None and entry.algorithm == "sha256" and data_digest(before.data) != entry.digest:
        raise Refused(f"{wheel_path.name}: {path} differs from the install's RECORD: not the wheel this was installed from",
                      hint="pass the right wheel with --wheel FILE")
    if difference.kind != "unrecorded" and before is None:
        raise Refused(f"{wheel_path.name} has no {path}: not the wheel this was installed from",
                      hint="pass the right wheel with --wheel FILE")
    file = Path(root) / path
    after = file.read_bytes() if file.exists() else None
    mode = file.stat().st_mode & 0o777 if after is not None else (before.mode if before else 0o644)
    old = before.data if before else None
    if base is not _PRISTINE:  # on top of the recorded series: from what it leaves in the file
        old = base
    if b"\0" in (old or b"") + (after or b""):
        note(f"{path}: binary file differs from RECORD; left out of the patch")
        return None
    return file_diff(path, old, after, mode)


# --- from a patch release: its Python changes as hotfixes for its .0 -----------------------------------

def _parse_release(text: str, base: str | None) -> tuple[str, str, str]:
    from packaging.version import InvalidVersion, Version

    dist, sep, release = text.partition("==")
    if not sep or not dist.strip() or not release.strip():
        raise UsageError(f"--from-release {text!r}: expected DIST==X.Y.Z, e.g. vllm==0.25.1")
    try:
        new = Version(release.strip())
        old = Version(base) if base else Version(f"{new.major}.{new.minor}.0")
    except InvalidVersion as exc:
        raise UsageError(f"--from-release / --base: {exc}") from None
    if old >= new:
        raise UsageError(f"--base {old} is not older than {dist.strip()} {new}")
    return dist.strip(), str(new), base or str(old)


def _slug_of(path: str, package: str) -> str:
    inner = path[len(package) + 1:] if path.startswith(package + "/") else path
    return re.sub(r"[^a-z0-9]+", "-", inner.removesuffix(".py").lower()).strip("-") or "file"


def _from_release(hotfix_id: str, text: str, base: str | None, *, split_by_file: bool
                  ) -> tuple[list[Draft], dict[str, Any]]:
    from vllm_hotfix.catalog.upstream import published_wheel
    from vllm_hotfix.catalog.wheeldiff import compare_wheels

    dist, release, base = _parse_release(text, base)
    old_wheel, new_wheel = published_wheel(dist, base), published_wheel(dist, release)  # Unavailable: exit 10
    diff = compare_wheels(old_wheel, new_wheel)
    if not diff.python:
        raise Refused(f"no Python file differs between {dist} {base} and {release}"
                      + (f" (compiled files do: {', '.join(diff.compiled)})" if diff.compiled else ""),
                      hint="a change in compiled code needs the release itself: pip install "
                           f"{dist}=={release}")
    lines = [f"{dist} {base} -> {release}: {len(diff.python)} Python file(s) differ; "
             f"{', '.join(diff.excluded) or 'no _version.py'} left out (the installed version stays {base})"]
    lines += [f"  {quote_path(f.path)}" for f in diff.python]
    if diff.compiled:
        lines.append(f"compiled files that differ, NOT included (the hotfix cannot carry them; recorded in the "
                     f"manifest as compiled_changes): {len(diff.compiled)}")
        lines += [f"  {quote_path(path)}" for path in diff.compiled]
    if diff.other:
        lines.append("other changed files, not included: " + ", ".join(map(quote_path, diff.other)))
    groups = [(f"{hotfix_id}-{_slug_of(f.path, diff.package)}", [f]) for f in diff.python] if split_by_file \
        else [(hotfix_id, list(diff.python))]
    seen: dict[str, int] = {}
    drafts = []
    for draft_id, files in groups:
        seen[draft_id] = seen.get(draft_id, 0) + 1
        if seen[draft_id] > 1:
            draft_id = f"{draft_id}-{seen[draft_id]}"
        data = b"".join(file_diff(f.path, f.before, f.after, f.mode) for f in files)
        names = ", ".join(f.path for f in files)
        compiled_note = (f" The patch release also changed {len(diff.compiled)} compiled file(s) "
                         f"({', '.join(diff.compiled)}), which no hotfix can carry: install {dist}=={release} for "
                         f"those.") if diff.compiled else ""
        fields = {
            "title": f"{dist} {release}'s Python changes for {base}: {names}" if len(files) == 1
            else f"{dist} {release}'s Python changes for {base} ({len(files)} files)",
            "description": f"The Python files that differ between the published {dist} {base} and {release} wheels: "
                           f"{names}. {', '.join(diff.excluded) or '_version.py'} is left out, so the installed "
                           f"version still says {base}.{compiled_note}",
            "references": [{"kind": "doc", "url": f"https://pypi.org/project/{dist}/{release}/",
                            "title": f"{dist} {release} on PyPI"}],
            "targets": [{"distribution": dist, "package": diff.package, "versions": f"=={base}"}],
            "top": {"fixed_in": release, **({"compiled_changes": list(diff.compiled)} if diff.compiled else {})},
            "comment": f"Written by `hotfix new --from-release {dist}=={release} --base {base}` from the two "
                       f"published wheels ({old_wheel.name}, {new_wheel.name}).",
        }
        drafts.append(Draft(draft_id, [NewPatch(f"{release}.patch", data, f"{dist} {base} -> {release}: {names}")],
                            fields))
    report = {"distribution": dist, "release": release, "base": base,
              "python": [f.path for f in diff.python], "excluded": list(diff.excluded),
              "compiled_changes": list(diff.compiled), "other_changes": list(diff.other), "lines": lines}
    return drafts, report


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
