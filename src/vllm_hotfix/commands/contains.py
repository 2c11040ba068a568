"""`hotfix contains (ID | --patch FILE)`: is this fix in this install, or in each published release? By content.

The answers come from ``flow.contains_fix`` (applicability, the record, ``core.presence``: the rules
status and check-catalog use). Exit codes: 0 contained / applied, 1 applicable (not in, applies) or
stale-bytecode (the recorded fix is in the files, a ``__pycache__`` entry Python would load is not), 3
not-applicable, 4 partly / conflicts; with ``--versions`` (a matrix) 0 when every release was
answered, 10 when one could not be downloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from packaging.version import Version

from vllm_hotfix_guard.errors import ExitCode, Refused, UsageError
from vllm_hotfix_guard.output import emit_json, note, quote_path, say

EXIT = {"contained": 0, "applied": 0, "applicable": 1, "stale-bytecode": 1, "not-applicable": int(ExitCode.REFUSED),
        "partly": int(ExitCode.DOES_NOT_APPLY), "conflicts": int(ExitCode.DOES_NOT_APPLY)}


def run(*, hotfix_id: str | None, patch_file: Path | None, python: str | None, root: Path | None,
        versions: str | None, package: str | None, distribution: str | None, strip: int | None,
        catalogs: Sequence[Path], as_json: bool, repo: Path | None = None) -> int:
    from vllm_hotfix.catalog.index import Catalog, parse_ref

    if (hotfix_id is None) == (patch_file is None):
        raise UsageError("give a hotfix ID or --patch FILE (exactly one)")
    if repo is not None and versions is None:
        raise UsageError("--repo reads releases from a clone's tags: give --versions too")
    if versions is not None and (python or root):
        raise UsageError("--versions reads published wheels: it takes no --python or --root")
    if python and root:
        raise UsageError("give --python or --root, not both")
    catalog = Catalog.load(catalogs)
    manifest = version = hotfix = None
    if hotfix_id is not None:
        ref_id, version = parse_ref(hotfix_id)
        manifest = catalog.get(ref_id, version)
        if manifest.kind == "advisory":
            manifest.patches_for(None)  # refuses: an advisory has no patch to look for
    else:
        from vllm_hotfix.flow.hotfix import adhoc_hotfix

        hotfix = adhoc_hotfix(patch_file, hotfix_id=None, strip=1 if strip is None else strip, package=package)
    if versions is not None:
        return _matrix(manifest, hotfix, versions, distribution or "vllm", as_json, repo)
    return _one(manifest, version, hotfix, python, root, package, catalog, as_json)


def _one(manifest, version, hotfix, python, root, package, catalog, as_json: bool) -> int:
    from vllm_hotfix.flow.contains_fix import hotfix_on_target, patch_on_target
    from vllm_hotfix.flow.survey import Survey

    survey = Survey(python, root, catalog)
    if manifest is not None:
        target, answer = hotfix_on_target(manifest, version, survey)
        what, where = manifest.ref, f"{target.distribution or target.package} {target.version or ''} at {target.root}"
    elif root is not None:
        if not Path(root).is_dir():
            raise UsageError(f"--root {root}: no such directory")
        answer = patch_on_target(hotfix.series, str(hotfix.version), Path(root), survey)
        what, where = str(hotfix.patches[0].label), str(root)
    else:
        target = survey.resolver.package(package or "vllm")
        answer = patch_on_target(hotfix.series, str(hotfix.version), target.root, survey, target.version)
        what, where = str(hotfix.patches[0].label), f"{target.distribution or target.package} {target.version or ''} at {target.root}"
    code = EXIT[answer.state]
    if as_json:
        emit_json({"hotfix": what, "target": where.replace("  ", " "), "exit_code": code, **answer.to_json()})
        return code
    say(f"{answer.state}: {quote_path(what)} on {where.replace('  ', ' ')}")
    say(f"  {answer.detail}")
    for line in _file_lines(answer):
        say(line)
    return code


def _file_lines(answer) -> list[str]:
    lines = []
    for f in answer.found.files if answer.found else ():
        hunks = "; ".join(f"{h.header} {h.state}" + (f" (line {h.line})" if h.line else "") for h in f.hunks)
        lines.append(f"  {quote_path(f.path)}: {f.state}" + (f": {hunks}" if hunks else ""))
    return lines


def _matrix(manifest, hotfix, versions: str, distribution: str, as_json: bool, repo: Path | None) -> int:
    from vllm_hotfix.catalog.upstream import open_release, published_releases
    from vllm_hotfix.flow.contains_fix import UNAVAILABLE, hotfix_on_release, patch_on_release
    from vllm_hotfix.flow.releases import parse_versions, releases_in_scope, skip_reason

    wanted = parse_versions(versions)
    if manifest is not None:
        reasons = [(t, skip_reason(manifest, t)) for t in manifest.targets]
        specs = [t for t, why in reasons if not why]
        if not specs:
            raise Refused(f"{manifest.ref}: cannot be checked on published wheels: {reasons[0][1]}")
        spec = specs[0]
        distribution = spec.distribution
    published = None if wanted.exact is not None else published_releases(distribution, repo=repo)
    releases = releases_in_scope(manifest, spec, wanted, published) if manifest is not None else wanted.pick(published)
    if not releases:
        raise Refused(f"no published release of {distribution} in {versions}")

    answers = []
    for index, release in enumerate(sorted(releases, key=Version), start=1):
        note(f"[{index}/{len(releases)}] {distribution} {release}")
        opened = []

        def opener(r: str):
            reader = open_release(distribution, r, repo=repo)
            opened.append(reader)
            return reader

        try:
            answers.append(hotfix_on_release(manifest, spec, release, opener) if manifest is not None
                           else patch_on_release(hotfix.series, release, opener))
        finally:
            for reader in opened:
                reader.close()
    what = manifest.ref if manifest is not None else str(hotfix.patches[0].label)
    code = int(ExitCode.UNAVAILABLE) if any(a.state == UNAVAILABLE for a in answers) else 0
    if as_json:
        emit_json({"hotfix": what, "distribution": distribution, "exit_code": code,
                   "releases": [a.to_json() for a in answers]})
        return code
    rows = [["RELEASE", *(a.release for a in answers)], [quote_path(Path(what).name), *(a.state for a in answers)]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        say("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    for answer in answers:
        if answer.state not in ("applicable", "contained"):
            say(f"{distribution} {answer.release}: {answer.state}: {answer.detail}")
    return code
