"""`hotfix new ID`: author a catalog entry (patches/ID/*.patch + manifests/ID.toml) with hashes and stats.

``--from-commit SHA --repo PATH``: the commit as ``git format-patch`` output (plus ``--add-patch`` files).
``--from-install PACKAGE``: the patch-package workflow: files edited by hand in an installed wheel,
diffed against the pristine bytes of the same release's wheel (``--wheel FILE`` or the cached / downloaded one).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from vllm_hotfix.core.diff import exclude_paths, parse_patch
from vllm_hotfix.errors import Refused, UsageError
from vllm_hotfix.catalog.model import ID_PATTERN
from vllm_hotfix.catalog.manifest import manifest_from_dict, parse_toml
from vllm_hotfix.output import emit_json, note, say
from vllm_hotfix.install.record import data_digest
from vllm_hotfix.txn.atomic import atomic_write


@dataclass(frozen=True)
class NewPatch:
    """A patch `hotfix new` made from hand edits, with the files it touches."""

    name: str  # file name under patches/ID/
    data: bytes
    description: str
    exclude: tuple[str, ...] = ()


def run(*, hotfix_id: str, commit: str | None = None, repo: Path | None = None, exclude: Sequence[str] = (),
        add_patches: Sequence[Path] = (), from_install: str | None = None, python: str | None = None,
        distribution: str | None = None, versions: str | None = None, out_dir: Path = Path("."),
        wheel: Path | None = None, dry_run: bool = False, as_json: bool = False) -> int:
    if not ID_PATTERN.fullmatch(hotfix_id):
        raise UsageError(f"hotfix id {hotfix_id!r}: use lowercase letters, digits and '-' (e.g. mamba-align-block-size)")
    if (commit is None) == (from_install is None):
        raise UsageError("give exactly one of --from-commit SHA (with --repo PATH) or --from-install PACKAGE")
    manifest_path = Path(out_dir) / "manifests" / f"{hotfix_id}.toml"
    if manifest_path.exists():
        raise Refused(f"{manifest_path} already exists; nothing was written",
                      hint="choose another id, or edit that manifest (raise its version) by hand")
    if commit is not None:
        patches, fields = _from_commit(commit, repo, exclude, distribution, versions)
    else:
        patches, fields = _from_install(from_install, python, versions, wheel)
    for offset, path in enumerate(add_patches, start=len(patches) + 1):
        data = Path(path).read_bytes()
        parse_patch(data, source=str(path))
        patches.append(NewPatch(f"{offset:04d}-{Path(path).name}", data, f"added from {Path(path).name}"))

    entries = [_patch_entry(hotfix_id, p) for p in patches]
    text = _render_manifest(hotfix_id, fields, entries)
    # Validate with the real loader before writing anything: a manifest we cannot load is never written.
    manifest_from_dict(parse_toml(text.encode(), str(manifest_path)), str(manifest_path))

    patch_dir = Path(out_dir) / "patches" / hotfix_id
    if not dry_run:
        patch_dir.mkdir(parents=True, exist_ok=True)
        manifest_path.parent.mkdir(parents=True, exist_ok=True)
        for p in patches:
            atomic_write(patch_dir / p.name, p.data)
        atomic_write(manifest_path, text.encode())  # last: the manifest only appears with its patches

    if as_json:
        emit_json({"id": hotfix_id, "manifest": str(manifest_path), "dry_run": dry_run,
                   "patches": [{"file": str(patch_dir / p.name), **{k: e[k] for k in ("md5", "sha256", "stats")}}
                               for p, e in zip(patches, entries)]})
        return 0
    wrote = "would write" if dry_run else "wrote"
    say(f"{wrote} {manifest_path}")
    for p, e in zip(patches, entries):
        s = e["stats"]
        files = f"{s['files']} file" + ("s" if s["files"] != 1 else "")
        say(f"{wrote} {patch_dir / p.name} ({files} +{s['insertions']}/-{s['deletions']})")
    if dry_run:
        say("dry run: nothing was written")
        return 0
    where = (f" --python {python}" if python else "") if from_install else " --root CHECKOUT"
    note(f"try it: hotfix show {hotfix_id} --catalog {out_dir} && hotfix apply {hotfix_id} --catalog {out_dir}{where} "
         "--dry-run; then fill in [[signatures]] (the commented example at the top of the manifest) and description")
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
                  wheel: Path | None) -> tuple[list[NewPatch], dict[str, Any]]:
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
    wheel_path = Path(wheel) if wheel else published_wheel(target.distribution, target.version)
    chunks = []
    with WheelReader(wheel_path) as pristine:
        for difference in changed:
            chunk = _diff_installed(target.root, difference, entries.get(difference.path), pristine, wheel_path)
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
    return [NewPatch(f"{target.version}.patch", data, f"edits to {label}")], fields


def _diff_installed(root: Path, difference: Any, entry: Any, pristine: Any, wheel_path: Path) -> bytes | None:
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
    if b"\0" in (before.data if before else b"") + (after or b""):
        note(f"{path}: binary file differs from RECORD; left out of the patch")
        return None
    return unified_file_diff(path, before.data if before else None, after, mode)


def unified_file_diff(path: str, before: bytes | None, after: bytes | None, mode: int = 0o644) -> bytes:
    """A ``git diff``-style diff of one file (a/ b/ prefixes); None sides are a created / deleted file."""
    name = path.encode("utf-8", "surrogateescape")
    head = [b"diff --git a/%s b/%s\n" % (name, name)]
    if before is None:
        head.append(b"new file mode 100%o\n" % (mode & 0o777))
    elif after is None:
        head.append(b"deleted file mode 100%o\n" % (mode & 0o777))
    old_lines = (before or b"").splitlines(keepends=True)
    new_lines = (after or b"").splitlines(keepends=True)
    body = difflib.diff_bytes(
        difflib.unified_diff, old_lines, new_lines,
        fromfile=b"/dev/null" if before is None else b"a/" + name,
        tofile=b"/dev/null" if after is None else b"b/" + name, lineterm=b"\n", n=3,
    )
    out = []
    for line in body:
        out.append(line if line.endswith(b"\n") else line + b"\n\\ No newline at end of file\n")
    return b"".join(head + out) if out or before is None or after is None else b""


# --- manifest text ------------------------------------------------------------------------------------

_MULTILINE_SAFE = re.compile(r"[^\x00-\x09\x0b-\x1f\x7f]*")  # no control characters but newline


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if "\n" in value and _MULTILINE_SAFE.fullmatch(value):
            return '"""\n' + value.replace("\\", "\\\\").replace('"', '\\"') + '"""'
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _render_manifest(hotfix_id: str, fields: dict[str, Any], patches: list[dict[str, Any]]) -> str:
    lines = [f"# {fields['comment']}",
             "# Fill in [[signatures]] (the log lines `hotfix doctor` recognises the crash by) and fixed_in when known:",
             "#   [[signatures]]", "#   pattern = 'CUDA error: an illegal memory access was encountered'",
             '#   role = "first-error"   # or context, config, noise', "#   weight = 0.5           # named at a total of 1.0",
             '#   explain = "why this line means this bug"',
             "schema = 1", f"id = {_toml_value(hotfix_id)}", "version = 1",
             f"title = {_toml_value(fields['title'])}", f"description = {_toml_value(fields['description'])}",
             "supersedes = []"]
    for table, rows in (("references", fields["references"]), ("targets", fields["targets"]), ("patches", patches)):
        for row in rows:
            lines += ["", f"[[{table}]]"] + [f"{k} = {_toml_value(v)}" for k, v in row.items()]
    return "\n".join(lines) + "\n"
