"""`hotfix audit PACKAGE`: every installed file of PACKAGE against pip's RECORD, in parallel."""

from __future__ import annotations

import sys

from vllm_hotfix.errors import ExitCode, Refused
from vllm_hotfix.output import emit_json, progress, quote_path, say
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
    loaded_is_audited = target.kind == "wheel"
    pristine = report.pristine and loaded_is_audited
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
    return int(ExitCode.OK) if pristine else int(ExitCode.NOT_IN_EFFECT)


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.0f} MB" if count >= 10_000_000 else f"{count / 1e6:.1f} MB"
