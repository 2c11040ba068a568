"""The drafts `hotfix new` writes, from each source: a commit (``from_commit``: ``git format-patch``
output), an installed wheel edited by hand (``from_install``: diffed against the same release's pristine
wheel), a patch release (``from_release``: its Python changes as hotfixes for its .0)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from vllm_hotfix_guard.core.diff import exclude_paths, parse_patch
from vllm_hotfix.core.render import file_diff
from vllm_hotfix_guard.errors import InvalidInput, Refused, UsageError
from vllm_hotfix_guard.output import note, quote_path
from vllm_hotfix.install.record import data_digest


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


def from_commit(commit: str, repo: Path | None, exclude: Sequence[str], distribution: str | None,
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

def from_install(package: str, python: str | None, versions: str | None,
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
    from vllm_hotfix_guard.txn.derive import Derivation
    from vllm_hotfix_guard.txn.state import TargetState

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


def from_release(hotfix_id: str, text: str, base: str | None, *, split_by_file: bool
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
