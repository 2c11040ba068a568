"""`hotfix status`: one state per hotfix and target, decided from the files themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from vllm_hotfix_guard.output import emit_json, quote_path, say

MARKS = {"applied": "ok", "fixed-upstream": "ok", "not-applied": "--", "not-applicable": "--"}


def derived_versions(targets: list) -> dict[str, str]:
    """root -> 'vllm 0.30.0 at ROOT: version derived from git tag v0.30.0' for targets whose version is
    derived from a checkout (install/version.py), not read from installed metadata."""
    return {str(t.root): f"{t.distribution or t.package} {t.version} at {t.root}: version derived from {t.version_from}"
            for t in targets if t.version_from and t.version}


def version_fields(status, targets: list) -> dict:
    """The target's version as the survey resolved it, what it was derived from (None: installed metadata),
    and its warnings (a PYTHONPATH overlay shadowing the install, ...: flow.resolve.warn says them)."""
    target = next((t for t in targets if str(t.root) == status.target), None)
    return {"installed_version": status.installed_version,
            "version_from": target.version_from if target is not None else None,
            "warnings": list(target.warnings) if target is not None else []}


def run(*, hotfix_ids: Sequence[str], python: str | None, root: Path | None, catalogs: Sequence[Path],
        all_targets: bool, as_json: bool, runtime: bool = False, lock_file: Path | None = None, vex: bool = False) -> int:
    """Exit 1 when a named or recorded hotfix is not in effect (catalog extras only inform)."""
    from vllm_hotfix_guard.core.verdict import exit_code

    if vex:
        if all_targets or runtime or lock_file or as_json:
            from vllm_hotfix_guard.errors import UsageError

            raise UsageError("--vex prints one OpenVEX document for one target: not with --all, --runtime, --lock "
                             "or --json")
        from vllm_hotfix.commands.status_vex import run as run_vex

        return run_vex(hotfix_ids=hotfix_ids, python=python, root=root, catalogs=catalogs)

    if runtime or lock_file:
        if all_targets or root or not runtime:
            from vllm_hotfix_guard.errors import UsageError

            raise UsageError("--runtime looks at one interpreter (--python) and --lock goes with it",
                             hint="`hotfix status --runtime --python PY [--lock hotfix.lock]`")
        return run_runtime(hotfix_ids=hotfix_ids, python=python, lock_file=lock_file, as_json=as_json)

    if all_targets:
        if hotfix_ids or python or root:
            from vllm_hotfix_guard.errors import UsageError

            raise UsageError("--all lists every recorded target: give no ID, --python or --root with it",
                             hint="`hotfix status --python PY` / `--root DIR` shows one target")
        return run_all(catalogs=catalogs, as_json=as_json)

    from vllm_hotfix.flow.survey import fingerprint

    from vllm_hotfix.flow.resolve import warn
    from vllm_hotfix.flow.survey import survey

    targets: list = []
    statuses = survey(hotfix_ids=hotfix_ids, python=python, root=root, catalogs=catalogs, with_catalog=True,
                      targets=targets)
    for target in targets:
        warn(target)
    named = bool(hotfix_ids)
    counted = [s for s in statuses if named or s.recorded]  # these decide the exit code, and the fingerprint
    code = exit_code(s.state for s in counted)  # core.verdict's rule: 0 only when every one is in effect
    digest = fingerprint(counted)
    names = code_names(statuses)
    if as_json:
        emit_json([dict(s.to_json(), fingerprint=digest, code=names.get((s.target, s.id)), **version_fields(s, targets))
                   for s in statuses])
        return code
    if not statuses:
        say("no hotfix recorded, and no catalog hotfix targets a package of this interpreter")
        hint_other_targets(targets)
        return 0
    width = max(len(s.id) for s in statuses)
    for s in statuses:  # recorded ones in series order (their place in it first, like `quilt applied`)
        say_status(s, width)
        for path, touched in (names.get((s.target, s.id)) or {}).items():
            say(f"     code: {quote_path(path)}: " + (", ".join(f"{quote_path(n['name'])} ({n['kind']})" for n in touched)
                                                   or "module-level lines only"))
    for line in derived_versions(targets).values():
        say(line)
    if counted:
        say(f"fingerprint: {digest}")
    if not any(s.recorded for s in statuses):  # only where nothing is recorded: no line on every status (issue 45)
        hint_other_targets(targets)
    return code


def hint_other_targets(targets: list) -> None:
    """A note when nothing is recorded for the target shown but the state directory records others: `status
    --all` lists them."""
    from vllm_hotfix_guard.errors import HotfixError
    from vllm_hotfix_guard.output import note
    from vllm_hotfix_guard.paths import TargetDir, all_target_dirs, state_dir

    try:
        shown = {TargetDir.of(t.root) for t in targets}
        others = [d for d in all_target_dirs() if d not in shown]
    except HotfixError:  # a state directory that cannot be read or trusted: the survey has said so
        return
    if others:
        note(f"{len(others)} other target(s) recorded in {quote_path(str(state_dir()))}: "
             "`hotfix status --all` lists them")


def code_names(statuses) -> dict:
    """(target, id) -> path -> [{"name", "kind"}]: what each recorded hotfix in effect changes in code
    (flow/codenames.py: the rule of the lock's names), for the Python files of its series."""
    from vllm_hotfix.flow.codenames import recorded_names

    wanted: dict[str, list[str]] = {}
    for s in statuses:
        if s.recorded and s.in_effect:
            wanted.setdefault(s.target, []).append(s.id)
    found = {}
    for root, ids in wanted.items():
        for hotfix_id, paths in recorded_names(Path(root), ids).items():
            found[(root, hotfix_id)] = {path: [{"name": n, "kind": k} for n, k in names] for path, names in paths.items()}
    return found


def run_runtime(*, hotfix_ids: Sequence[str], python: str | None, lock_file: Path | None, as_json: bool) -> int:
    """`status --runtime`: flow/runtime.py in the interpreter --python names (as every command resolves it);
    exit 1 when a rebinding touches a hotfix or the guard's check there finds one not in effect (a stale
    .pyc Python would load, a stale alias or a shadowed function, a file without its fix)."""
    import tempfile

    from vllm_hotfix_guard.errors import NotInEffect
    from vllm_hotfix.flow.resolve import Resolver
    from vllm_hotfix.flow.runtime import fixed_names_of_lock, fixed_names_of_record, names_lock, survey
    from vllm_hotfix_guard.output import note

    target = Resolver(python).package("vllm")
    require: tuple = ()
    with tempfile.TemporaryDirectory(prefix="hotfix-runtime-") as work:
        names_file = None
        if lock_file is not None:
            from vllm_hotfix_guard.txn.hotfix_lock import load_lock

            lock = load_lock(Path(lock_file))
            names = fixed_names_of_lock(lock)
        else:
            from vllm_hotfix_guard.txn.state import TargetState

            state = TargetState.for_root(Path(target.root))
            checked = [h for h in state.hotfixes if not hotfix_ids or h in hotfix_ids]
            names = fixed_names_of_record(Path(target.root), checked)
            require, data = tuple(checked), names_lock(target, state, checked) if checked else None
            if data is not None:
                names_file = Path(work) / "names.lock"
                names_file.write_bytes(data)
        if hotfix_ids:
            names = {h: n for h, n in names.items() if h in hotfix_ids}
        interpreter = target.python or python or "python"
        if not as_json:
            note(f"loading vLLM's plugins and the platform's patches with {quote_path(str(interpreter))} "
                 "(this imports vLLM)...")
        found = survey(str(interpreter), names, lock=lock_file, require=require, names_file=names_file)
    shown = [v for v in found.verdicts if not hotfix_ids or v["hotfix_id"] in hotfix_ids]
    touching = [r for r in found.rebinds if r.touches]
    failing = [v for v in shown if not v["in_effect"]]
    code = int(NotInEffect.exit_code) if touching or failing else 0
    if as_json:
        emit_json({**found.to_json(), "verdicts": shown})
        return code
    plugins = "every installed plugin (VLLM_PLUGINS unset)" if found.plugins is None else f"VLLM_PLUGINS={found.plugins!r}"
    say(f"runtime of {quote_path(found.python)}: {plugins}; plugin packages: "
        f"{', '.join(quote_path(p) for p in found.packages) or '(none)'}; platform {quote_path(str(found.platform))}")
    for r in found.rebinds:
        now = r.now
        at = f" ({quote_path(str(now['file']))}:{now['line']})" if now.get("file") else ""
        mark = f"  TOUCHES {', '.join(r.touches)}" if r.touches else ""
        say(f"  {quote_path(r.module)}:{quote_path(r.name)} -> {quote_path(str(now.get('module')))}."
            f"{quote_path(str(now.get('qualname')))}{at} [{r.phase}]{mark}")
    fixed = sum(len(n) for n in names.values())
    say(f"{len(found.rebinds)} rebinding(s) of vLLM functions, {len(touching)} touching a hotfix "
        f"({fixed} fixed name(s) of {len(names)} hotfix(es) checked)")
    if touching:
        say("  to do: the fix does not run where a plugin rebinds it: remove or update that plugin (or make it call "
            "the fixed function); the guard stops such a process under HOTFIX_STRICT=1")
    _say_guard(shown, failing, found.fingerprint)
    return code


def _say_guard(shown: list, failing: list, fingerprint: str | None) -> None:
    """The guard's verdicts in that interpreter, after its plugins: one line per hotfix not in effect."""
    if not shown:
        say("the guard there: no hotfix to check")
        return
    ok = sorted({v["hotfix_id"] for v in shown} - {v["hotfix_id"] for v in failing})
    say(f"the guard there, after the plugins: {len(failing)} verdict(s) not in effect"
        + (f"; in effect: {', '.join(ok)}" if ok else "") + (f" (fingerprint {fingerprint})" if fingerprint else ""))
    for v in failing:
        say(f"  {v['hotfix_id']} NOT IN EFFECT [{v['source']}]: {v['detail']}")
        if v["remedy"]:
            say(f"     to do: {v['remedy']}")


def say_status(s, width: int, *, indent: str = "", target: bool = True) -> None:
    """One hotfix's lines: mark, place in the series, id, state word, version (and target), then why and what to do."""
    version = f"@{s.version}" if s.version is not None else ""
    place = f"{s.position}." if s.position is not None else ""
    where = f" {s.target}" if target else ""
    say(f"{indent}{MARKS.get(s.state, '!!')} {place:>3} {s.id:<{width}} {s.state:<14} {version}{where}".rstrip())
    if s.detail:
        say(f"{indent}     {s.detail}")
    if s.to_do:
        say(f"{indent}     to do: {s.to_do}")


def run_all(*, catalogs: Sequence[Path], as_json: bool) -> int:
    """`status --all`: every target the state directory records, with its series and words; gone ones
    marked STALE. Exit 1 when a recorded hotfix of a live target is not in effect (or cannot be judged)."""
    from vllm_hotfix.catalog.index import Catalog
    from vllm_hotfix_guard.core.verdict import IN_EFFECT
    from vllm_hotfix_guard.errors import NotInEffect
    from vllm_hotfix.flow.overview import overview
    from vllm_hotfix.flow.survey import fingerprint
    from vllm_hotfix_guard.paths import state_dir

    reports = overview(Catalog.load(catalogs))
    failing = any((not r.stale and r.not_judged) or any(s.state not in IN_EFFECT for s in r.statuses)
                  for r in reports)  # a live target whose record cannot be read or judged is not "in effect"
    code = int(NotInEffect.exit_code) if failing else 0
    if as_json:
        emit_json({"state_dir": str(state_dir()), "targets": [
            dict(r.to_json(), fingerprint=fingerprint(r.statuses) if r.statuses else None) for r in reports]})
        return code
    if not reports:
        say(f"nothing recorded in {state_dir()}")
        return code
    width = max((len(i) for r in reports for i in r.recorded), default=10)
    for report in reports:
        t = report.target
        what = " ".join(quote_path(str(v)) for v in (t.get("distribution") or t.get("package"), t.get("version")) if v)
        how = ", ".join(quote_path(str(v)) for v in (t.get("kind"), t.get("python")) if v)
        say(quote_path(str(report.root or report.directory)) + (f"  {what}" if what else "") + (f" ({how})" if how else "")
            + (f"  STALE: {_stale_words(report)}" if report.stale else ""))
        if report.statuses:
            for s in report.statuses:
                say_status(s, width, indent="  ", target=False)
            say(f"  fingerprint: {fingerprint(report.statuses)}")
            continue
        for place, hotfix_id in enumerate(report.recorded, 1):
            say(f"  -- {place:>2}. {hotfix_id:<{width}} recorded")
        if not report.recorded and not report.pending and not report.not_judged:
            say("  nothing recorded (every hotfix was rolled back; `hotfix log` shows when)")
        if report.not_judged and not report.stale:
            say(f"     not judged: {report.not_judged}")
    stale = sum(r.stale for r in reports)
    say(f"{len(reports)} target(s) in {state_dir()}" + (f", {stale} stale (`hotfix gc --dry-run` shows what it "
                                                        f"would remove)" if stale else ""))
    return code


def _stale_words(report) -> str:
    from vllm_hotfix.flow.gone_targets import GONE

    if report.state == GONE:
        return f"the target is gone ({report.reason})"
    return f"{report.state}: {report.reason}"
