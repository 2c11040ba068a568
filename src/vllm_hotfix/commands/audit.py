"""`hotfix audit PACKAGE`: every installed file of PACKAGE against pip's RECORD, in parallel."""

from __future__ import annotations

import sys

from pathlib import Path

from vllm_hotfix_guard.errors import ExitCode, Refused
from vllm_hotfix_guard.output import emit_json, progress, quote_path, say
from vllm_hotfix.flow.resolve import Resolver, warn


def run(*, package: str, python: str | None = None, as_json: bool = False) -> int:
    resolver = Resolver(python)
    resolver.prefetch()  # the probe's interpreter starts first, while the RECORD reader and hashing load
    from vllm_hotfix.install import record

    target = resolver.package(package)
    warn(target)  # before a refusal: a PYTHONPATH overlay is often why there is no RECORD to audit
    hint = "check a source checkout with `git status`; `hotfix where` shows what is loaded and its git state"
    if target.kind == "editable":
        raise Refused(f"{package} is an editable install from {target.root}: pip's RECORD does not cover its files, nothing to audit", hint=hint)
    if not target.has_record:
        raise Refused(f"{package} at {target.package_dir} is a {target.kind} install without a pip RECORD: nothing to audit", hint=hint)
    assert target.dist_info is not None
    site_packages = target.dist_info.parent
    entries = record.read_record(target.dist_info)
    show_progress = sys.stderr.isatty() and not as_json
    report = record.audit(
        site_packages, entries,
        progress=(lambda ticks, total: progress(ticks, total, f"auditing {target.distribution}")) if show_progress else None,
    )
    report = _with_stale_bytecode(report, target, site_packages)
    judged = _recorded(target)
    loaded_is_audited = target.kind == "wheel"
    pristine = report.pristine and loaded_is_audited
    missing = [j for j in judged if not j.in_effect]  # a pristine install whose record says a fix belongs there
    if as_json:
        emit_json({
            "pristine": pristine,
            "files_checked": report.files_checked,
            "bytes": report.bytes,
            "differences": [d.to_json() for d in report.differences],
            "bytecode_missing": report.bytecode_missing,
            "distribution": target.distribution,
            "version": target.version,
            "site_packages": str(site_packages),
            "path": str(target.package_dir),
            "kind": target.kind,
            "warnings": list(target.warnings),
            "recorded": [{"id": j.hotfix_id, "version": j.version, "state": j.state, "detail": j.detail} for j in judged],
            "fingerprint": _fingerprint(judged),
        })
    else:
        for difference in report.differences:
            say(f"{difference.flags:<10} {quote_path(difference.path)}")
        if report.bytecode_missing:
            say(f"{report.bytecode_missing} recorded __pycache__/*.pyc file(s) missing: "
                "not a difference, Python recompiles them on import")
        if not report.pristine:
            verdict = f"NOT pristine, {len(report.differences)} difference(s)"
        elif not loaded_is_audited:
            verdict = f"files match, but NOT what is loaded: {package} is loaded from {target.package_dir}"
        else:
            verdict = "pristine"
        say(f"{target.distribution} {target.version}: {report.files_checked} files, "
            f"{_megabytes(report.bytes)} checked against {target.dist_info.name}/RECORD: {verdict}")
        for j in judged:  # what the record says belongs here, in `hotfix status`'s words
            say(f"recorded: {j.hotfix_id}@{j.version} {j.state}" + (f": {j.detail}" if not j.in_effect else ""))
        if judged:
            say(f"fingerprint: {_fingerprint(judged)}")
    return int(ExitCode.OK) if pristine and not missing else int(ExitCode.NOT_IN_EFFECT)


def _recorded(target) -> list:
    """The one verdict (txn/judgement, as `hotfix status` gives it: the catalog's pins included) on each hotfix
    recorded for this install."""
    from vllm_hotfix.catalog.index import Catalog
    from vllm_hotfix_guard.errors import HotfixError
    from vllm_hotfix.flow.series import judge_recorded
    from vllm_hotfix_guard.txn.state import TargetState

    try:
        state = TargetState.for_root(target.root)
    except HotfixError:
        return []
    return list(judge_recorded(state, target, catalog=Catalog.load(())).values()) if state.hotfixes else []


def _fingerprint(judged: list) -> str | None:
    from vllm_hotfix_guard.core.fingerprint import fingerprint
    from vllm_hotfix_guard.txn.judgement import fingerprint_entries

    return fingerprint(fingerprint_entries(judged)) if judged else None


def _with_stale_bytecode(report, target, site_packages):
    """The report plus a ``stale-bytecode`` difference for each ``__pycache__`` entry Python would load
    instead of a source that differs from RECORD or that a recorded hotfix changed (install/bytecode.py,
    judged in the target interpreter): such an entry runs other code than the file audited."""
    from dataclasses import replace

    from vllm_hotfix_guard.errors import HotfixError
    from vllm_hotfix.install.in_target import in_interpreter
    from vllm_hotfix.install.record import Difference
    from vllm_hotfix_guard.txn.state import TargetState

    paths = {d.path for d in report.differences if d.kind in ("digest", "size")}
    try:
        paths |= {f.path for h in TargetState.for_root(target.root).hotfixes.values() for f in h.files}
    except HotfixError:  # a record that cannot be read names no file; the audit itself stands
        pass
    sources = sorted(str(site_packages / p) for p in paths if p.endswith(".py") and (site_packages / p).is_file())
    found = []
    for source, entries in in_interpreter(target.python, sources).items():
        for pyc, why in entries:
            try:
                rel = Path(pyc).relative_to(site_packages).as_posix()
            except ValueError:
                rel = pyc
            found.append(Difference(rel, "stale-bytecode", None, why))
    if not found:
        return report
    return replace(report, differences=tuple(sorted(report.differences + tuple(found), key=lambda d: d.path)))


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.0f} MB" if count >= 10_000_000 else f"{count / 1e6:.1f} MB"
