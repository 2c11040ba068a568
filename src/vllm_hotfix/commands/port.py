"""`hotfix port ID --out DIR`: new variants of a catalog hotfix for the published releases where none applies.

The work is ``flow.port_plan.port`` (judging each release like check-catalog, merging with ``git merge-file``);
this module lists the releases, opens their cached wheels, prints the outcome, and writes a copy of the
hotfix's catalog entry into ``--out`` (its manifest with the new ``[[patches]]``, its patch files and the
new ones), the manifest last. All or nothing: a release that conflicts (exit 4) or that could not be
downloaded (exit 10) means nothing is written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from vllm_hotfix.catalog.index import Catalog, parse_ref
from vllm_hotfix.catalog.manifest_text import edit_patches, patch_row
from vllm_hotfix.catalog.model import Manifest, TargetSpec
from vllm_hotfix_guard.errors import ExitCode, InvalidInput, Refused, Unavailable
from vllm_hotfix.flow.port_plan import CONFLICTS, FAILED, PortResult, port
from vllm_hotfix.flow.releases import parse_versions, releases_in_scope, skip_reason
from vllm_hotfix_guard.output import emit_json, note, say
from vllm_hotfix_guard.txn.atomic import atomic_write
from vllm_hotfix_guard.paths import make_state_dir  # 0o755 whatever the umask


def run(*, hotfix_id: str, versions: str | None = None, catalogs: Sequence[Path] = (), out_dir: Path,
        repo: Path | None = None, dry_run: bool = False, as_json: bool = False) -> int:
    from vllm_hotfix.catalog.upstream import open_release, published_releases
    from vllm_hotfix.install.git import git_available

    manifest = Catalog.load(catalogs).get(*parse_ref(hotfix_id))
    spec = _portable_target(manifest)
    if not git_available():
        raise Refused("git is not installed here: `hotfix port` merges with `git merge-file`",
                      hint="port is an authoring command: run it on a machine with git (apt-get install git); "
                           "apply, verify and contains need no git")
    out_manifest = Path(out_dir) / "manifests" / f"{manifest.id}.toml"
    in_place = _same_file(out_manifest, manifest.source)
    if out_manifest.exists() and not in_place:
        raise Refused(f"{out_manifest} already exists and is not {manifest.source}; nothing was written",
                      hint="choose an empty --out, or --out the hotfix's own catalog directory to update it in place")
    wanted = parse_versions(versions)
    try:
        published = published_releases(spec.distribution, repo=repo)
    except Unavailable:
        if wanted.exact is None:
            raise
        published = list(wanted.exact)  # ranges then end at the last release asked for
    releases = releases_in_scope(manifest, spec, wanted, published)
    if not releases:
        raise Refused(f"no published release of {spec.distribution} in {versions or spec.versions}",
                      hint="`--versions` takes releases (0.30.0,0.31.0) or a range ('>=0.30')")

    readers: dict = {}

    def opener(release: str):
        if release not in readers:
            readers[release] = open_release(spec.distribution, release, repo=repo)
        return readers[release]

    try:
        result = port(manifest, spec, releases, published=published, open_release=opener)
    finally:
        for reader in readers.values():
            reader.close()

    code = (int(ExitCode.DOES_NOT_APPLY) if result.failed else int(ExitCode.UNAVAILABLE) if result.unavailable
            else 0)
    writes = _planned_writes(manifest, result, Path(out_dir), out_manifest, in_place) if code == 0 else []
    if writes and not dry_run:
        for path, data in writes:  # the manifest is last: it only appears with its patches
            make_state_dir(path.parent)
            atomic_write(path, data)
    if as_json:
        emit_json(_to_json(manifest, spec, result, writes, out_dir, dry_run, code))
    else:
        _print(manifest, spec, result, writes, dry_run, code, Path(out_dir))
    return code


def _portable_target(manifest: Manifest) -> TargetSpec:
    reasons = [(t, skip_reason(manifest, t)) for t in manifest.targets]
    portable = [t for t, why in reasons if not why]
    if not portable:
        raise Refused(f"{manifest.ref} cannot be ported on published wheels: {reasons[0][1]}",
                      hint="port needs a [[targets]] versions range and patch files in the catalog")
    if len(portable) > 1:
        raise Refused(f"{manifest.ref} has {len(portable)} targets ({', '.join(t.distribution for t in portable)}); "
                      "port handles one", hint="split the manifest, one target per hotfix")
    if any(p.exclude for p in manifest.patches):
        note(f"{manifest.ref}: files matched by a patch's `exclude` are left out of the ported variants")
    return portable[0]


def _same_file(path: Path, other: Path | None) -> bool:
    try:
        return other is not None and path.exists() and os.path.samefile(path, other)
    except OSError:
        return False


def _planned_writes(manifest: Manifest, result: PortResult, out_dir: Path, out_manifest: Path,
                    in_place: bool) -> list[tuple[Path, bytes]]:
    """Every (path, bytes) to write, checked before the first write; [] when there is nothing to port."""
    if not result.variants:
        return []
    source = manifest.source
    try:
        text = source.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError, AttributeError) as exc:
        raise InvalidInput(f"{source}: cannot read the manifest to edit it: {exc}") from None
    edited = edit_patches(text, str(out_manifest), manifest, versions=result.narrowed,
                          added=[patch_row(v.spec()) for v in result.variants])
    writes: list[tuple[Path, bytes]] = []
    patches_out = out_dir / "patches"
    if not in_place:
        for spec in manifest.patches:
            if spec.kind == "file":
                writes.append((patches_out / spec.file, manifest.patch_path(spec).read_bytes()))
    writes += [(patches_out / v.file, v.data) for v in result.variants]
    for path, data in writes:
        if path.exists() and (not path.is_file() or path.is_symlink() or path.read_bytes() != data):
            raise Refused(f"{path} already exists with other content; nothing was written",
                          hint="choose an empty --out directory")
    writes = [(p, d) for p, d in writes if not p.exists()]
    return writes + [(out_manifest, edited.encode())]


def _to_json(manifest, spec, result: PortResult, writes, out_dir, dry_run: bool, code: int) -> dict:
    return {
        "id": manifest.id, "version": manifest.version, "distribution": spec.distribution, "out": str(out_dir),
        "dry_run": dry_run, "exit_code": code, "written": [] if dry_run else [str(p) for p, _ in writes],
        "would_write": [str(p) for p, _ in writes] if dry_run else [],
        "releases": [r.to_json() for r in result.releases],
        "variants": [{"file": v.file, "versions": v.versions, "made_on": v.made_on, "base": v.base,
                      "releases": v.releases, "by_words": v.by_words, **_pins(v)} for v in result.variants],
        "narrowed": [{"file": manifest.patches[i].label, "versions": r} for i, r in result.narrowed.items()],
        "proposed_fixed_in": result.proposed_fixed_in,
    }


def _pins(variant) -> dict:
    spec = variant.spec()
    return {"md5": spec.md5, "sha256": spec.sha256,
            "stats": {"files": spec.stats.files, "insertions": spec.stats.insertions, "deletions": spec.stats.deletions}}


def _indent(data: bytes, limit: int = 12) -> list[str]:
    lines = data.decode("utf-8", "replace").splitlines() or ["(nothing)"]
    shown = [f"    | {line}" for line in lines[:limit]]
    if len(lines) > limit:
        shown.append(f"    | ... ({len(lines) - limit} more lines)")
    return shown


def _print(manifest: Manifest, spec: TargetSpec, result: PortResult, writes, dry_run: bool, code: int,
           out_dir: Path | None = None) -> None:
    rows = [("RELEASE", "STATE", "VARIANT", "DETAIL")]
    rows += [(r.release, r.state, r.variant or "", r.detail) for r in result.releases]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        say("  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths)) + "  " + row[3])
    for r in result.releases:
        if r.state != CONFLICTS or not r.conflicts:
            continue
        for c in r.conflicts:
            where = f" at line {c.line}" if c.line else ""
            say(f"{spec.distribution} {r.release}: {c.path}: hunk {c.hunk or '(whole file)'} conflicts{where}")
            say(f"  {spec.distribution} {r.release} has:")
            for line in _indent(c.release):
                say(line)
            say(f"  the patch (on {r.base}) wants:")
            for line in _indent(c.patched):
                say(line)
    if result.proposed_fixed_in:
        say(f"fixed_in is missing: {spec.distribution} {result.proposed_fixed_in} already holds the fix by content; "
            f"add fixed_in = \"{result.proposed_fixed_in}\" to {manifest.source}")
    if code:
        failed = [r.release for r in result.releases if r.state in FAILED]
        why = (f"{len(failed)} release(s) did not port ({', '.join(failed)})" if failed
               else "some releases were unavailable")
        say(f"nothing was written: {why}; resolve by hand, or leave them out with --versions")
        return
    if not writes and not result.variants:
        say("nothing to port: every release in range has a variant that applies, or is fixed upstream")
        return
    verb = "would write" if dry_run else "wrote"
    for path, data in writes:
        variant = next((v for v in result.variants if str(path).endswith(v.file)), None)
        extra = ""
        if variant is not None:
            stats = variant.spec().stats
            extra = f" ({stats.describe().replace('files', 'file' if stats.files == 1 else 'files')}, versions {variant.versions})"
        say(f"{verb} {path}{extra}")
    for index, versions in result.narrowed.items():
        say(f"{manifest.patches[index].label}: versions now {versions} (a ported variant covers the rest)")
    if dry_run:
        say("dry run: nothing was written")
    elif writes and out_dir is not None:
        shadow = " --allow-shadow" if manifest.id in _builtin_ids() else ""
        say(f"next: hotfix check-catalog {manifest.id} --catalog {out_dir}{shadow}  (the ported catalog"
            f"{' shadows a built-in id: say so with --allow-shadow' if shadow else ''})")


def _builtin_ids() -> set[str]:
    from vllm_hotfix.catalog.index import Catalog

    return set(Catalog.load((), env={}).ids())
