"""`hotfix catalog watch [ID]... [--since V] [--write]`: every hotfix against the releases published after
the range its manifest records (flow/watch.py), for a team's scheduled CI job.

Prints one line per hotfix and new release (fixed-upstream, still-applies, ported, conflicts,
unavailable) and what to do. --write edits the manifests in place (catalog/watch_text.py: line edits,
checked by loading them back), each written atomically, and prints the unified diff for review. Exit 0:
nothing to do (or all of it written); 1: a proposal not written; 4: a release conflicts (port could
not merge); 10: a release could not be listed or downloaded.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Optional, Sequence

from vllm_hotfix.catalog.index import Catalog, parse_ref
from vllm_hotfix_guard.errors import ExitCode, InvalidInput, Unavailable, UsageError
from vllm_hotfix.flow import watch
from vllm_hotfix_guard.output import emit_json, quote_path, say, say_lines


def run(*, hotfix_ids: Sequence[str] = (), since: Optional[str] = None, catalogs: Sequence[Path] = (),
        write: bool = False, as_json: bool = False) -> int:
    from vllm_hotfix.catalog.upstream import open_release as open_published, published_releases

    if since is not None:
        from packaging.version import InvalidVersion, Version

        try:
            Version(since)
        except InvalidVersion:
            raise UsageError(f"--since {since!r}: not a release number (e.g. 0.32.0)") from None
    catalog = Catalog.load(catalogs)
    manifests = [catalog.get(*parse_ref(ref)) for ref in hotfix_ids] if hotfix_ids else list(catalog.latest())
    rows: list[watch.Row] = []
    proposals: list[watch.Proposal] = []
    readers: dict[tuple[str, str], object] = {}  # a wheel's or an sdist's reader (upstream.open_release)
    try:
        for manifest in manifests:
            for target in manifest.targets:
                skipped = watch.skipped_row(manifest, target)
                if skipped is not None:
                    rows.append(skipped)
                    continue
                try:
                    published = published_releases(target.distribution)
                except Unavailable as exc:
                    rows.append(watch.Row(hotfix=manifest.ref, distribution=target.distribution, release=None,
                                          state=watch.UNAVAILABLE, detail=exc.message))
                    continue

                def open_release(release: str, dist: str = target.distribution):
                    if (dist, release) not in readers:
                        readers[(dist, release)] = open_published(dist, release)
                    return readers[(dist, release)]

                found, proposal = watch.watch_target(manifest, target, published, since=since,
                                                     open_release=open_release, port=_porter(published, open_release))
                rows += found
                proposals.append(proposal)
    finally:
        for reader in readers.values():
            reader.close()
    pending = [p for p in proposals if p.fixed_in or p.extend_to]
    diffs = [_write(p) for p in pending] if write else []
    code = (int(ExitCode.DOES_NOT_APPLY) if any(r.state == watch.CONFLICTS for r in rows)
            else int(ExitCode.UNAVAILABLE) if any(r.state == watch.UNAVAILABLE for r in rows)
            else 1 if (pending and not write) or any(r.state == watch.PORTED for r in rows) else 0)
    if as_json:
        emit_json({"rows": [r.to_json() for r in rows], "proposals": [_proposal_json(p) for p in pending],
                   "written": write, "diffs": diffs, "exit_code": code})
        return code
    _print(rows, pending, write)
    for diff in diffs:
        say_lines(diff.splitlines())
    return code


def _porter(published: list[str], open_release):
    from vllm_hotfix.install.git import git_available

    if not git_available():
        return None  # conflicts stay conflicts; the line says port needs git

    def port(manifest, spec, releases):
        from vllm_hotfix.flow.port_plan import port as port_plan

        return port_plan(manifest, spec, releases, published=published, open_release=open_release)
    return port


def _print(rows: list[watch.Row], pending: list[watch.Proposal], write: bool) -> None:
    if not rows:
        say("nothing to watch: no hotfix in the catalog")
    for row in rows:
        where = f"{row.distribution} {row.release}" if row.release else row.distribution
        say(f"{row.hotfix} on {where}: {row.state}: {row.detail}")
    for proposal in pending:
        say(f"{proposal.manifest.ref}: {_describe(proposal)}" + (" (written)" if write else ""))
    if pending and not write:
        say("write these with `hotfix catalog watch --write` (then review the diff and commit it)")


def _describe(proposal: watch.Proposal) -> str:
    parts = []
    if proposal.fixed_in:
        parts.append(f"set fixed_in = {proposal.fixed_in} (fixed upstream there)")
    if proposal.extend_to:
        parts.append(f"extend {proposal.target.distribution} versions to {_extended(proposal)}")
    return "; ".join(parts)


def _extended(proposal: watch.Proposal) -> str:
    low = watch.open_range(proposal.target.versions)
    upper = f"<{proposal.next_release}" if proposal.next_release else f"<={proposal.extend_to}"
    return ",".join(part for part in (low, upper) if part)


def _proposal_json(proposal: watch.Proposal) -> dict:
    return {"hotfix": proposal.manifest.ref, "distribution": proposal.target.distribution,
            "fixed_in": proposal.fixed_in, "extend_to": proposal.extend_to,
            "versions": _extended(proposal) if proposal.extend_to else None,
            "source": str(proposal.manifest.source) if proposal.manifest.source else None}


def _write(proposal: watch.Proposal) -> str:
    """Edit the manifest in place (atomically) and return the unified diff of the change."""
    from vllm_hotfix.catalog.watch_text import edit_manifest
    from vllm_hotfix_guard.txn.atomic import atomic_write

    manifest = proposal.manifest
    source = manifest.source
    if source is None:
        raise InvalidInput(f"{manifest.ref}: no manifest file to write")
    text = source.read_bytes().decode("utf-8")
    versions = _extended(proposal) if proposal.extend_to else None
    newest = watch.newest_patch(manifest) if versions else None
    patch_versions = {}
    if newest is not None and manifest.patches[newest].versions is not None:
        low = watch.open_range(manifest.patches[newest].versions)
        upper = versions.split(",")[-1]
        patch_versions[newest] = ",".join(part for part in (low, upper) if part)
    edited = edit_manifest(text, str(source), manifest, target_index=manifest.targets.index(proposal.target),
                           target_versions=versions, patch_versions=patch_versions, fixed_in=proposal.fixed_in)
    atomic_write(source, edited.encode("utf-8"))
    name = quote_path(str(source))
    return "".join(difflib.unified_diff(text.splitlines(True), edited.splitlines(True), f"a/{name}", f"b/{name}"))
