"""`hotfix doctor [LOG ...]`: from a crash log to the hotfix (or advisory) that fixes it.

Reads the logs (``commands.doctor_logs``: files, ``-`` for stdin, FIFOs, ``.gz`` by content, in 8 MiB blocks
and bounded memory), hands them to the pure
engine (``vllm_hotfix.doctor``), which prefilters them in this process (``doctor.prefilter``: SIMD
Aho-Corasick; ``HOTFIX_DOCTOR_PREFILTER=grep`` pipes the blocks through ``grep -F`` instead,
``=python`` uses ``bytes.find``), then decides each match's *level* by evidence tier:

- ``confident`` ("apply X"): specific evidence, no veto, and an in-range release from the log or the
  target; joined with the target in ONE place, ``_target_state``, which asks the code `hotfix status`
  uses (it is also what judges the log's own release, called without a target);
- ``possible`` ("possible, check X"): a generic error and a fact of the bug's trigger condition (a
  ``condition`` signature), or specific evidence without a release to check the range with; it prints
  the manifest's ``[[confirm]]`` steps and then the ``hotfix apply ID --dry-run`` to run (with the
  ``--python`` / ``--root`` / ``--catalog`` doctor was given);
- ``shared`` (no candidate): a generic error alone; the report says which catalog entries share it and
  what would tell them apart (their conditions, their specific evidence);
- ``ruled-out``: a veto, another engine, a platform the bug does not occur on, another faulting kernel,
  or the log's release outside the range.

Exit codes follow the printed confidence: 1 a confident match's fix is not in effect (any state but
applied / fixed-upstream: not applied, lost, stale, drifted, interrupted, unknown), or the guard
fingerprints differ; 0 every confident match is already in effect, or nothing matched and the
fingerprints of every node agree; 9 no confident match.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Sequence

from vllm_hotfix_guard.errors import ExitCode, HotfixError, UsageError
from vllm_hotfix.commands.doctor_diagnosis import IN_EFFECT, OUT_OF_RANGE, Diagnosis
from vllm_hotfix.commands.doctor_logs import prefilter_kind, sources
from vllm_hotfix.commands.doctor_report import print_fingerprints, print_report
from vllm_hotfix_guard.output import emit_json, say


def _target_state(manifest, *, python: str | None, root: Path | None, catalog,
                  log_versions: dict[str, str]) -> tuple[str, str, str | None]:
    """(state word, detail, the one command to run next) for a matched manifest on the target.

    The ONE place doctor joins with an install: it asks what `hotfix status` asks (flow.survey.Survey,
    flow.resolve.Resolver, flow.applicability) for every state but ``unknown``, which it says itself when
    there is nothing to judge (no target and no release in the log, no patch for the target). An advisory
    ``fixed_by`` a catalog hotfix takes that hotfix's state. Without --python/--root no install is
    looked at: the release the log names decides only fixed-upstream / not-applicable, else unknown.
    """
    from vllm_hotfix.catalog.index import parse_ref, hotfix_version_key
    from vllm_hotfix.flow.applicability import applicability, release_target

    fix_id, fix_version = parse_ref(manifest.fixed_by) if manifest.fixed_by else (manifest.id, None)
    subject = catalog.get(fix_id) if manifest.fixed_by else manifest
    option = _option(python, root, catalog)
    logged = [(s, log_versions[s.distribution]) for s in subject.targets if s.distribution in log_versions]
    apply = (f"hotfix apply {subject.id} {option}".rstrip()
             + (" --patch-file PATH" if any(p.kind == "external" for p in subject.patches) else ""))
    if subject.kind == "advisory":
        apply = f"follow the workaround (hotfix show {manifest.id})"
    if python is None and root is None:
        if not logged:
            return "unknown", "no --python/--root given and the log does not name its release", apply
        spec, version = logged[0]
        where = f"the log's {spec.distribution} {version}"
        why_not = applicability(subject, spec, release_target(spec, version))  # the rule apply and status use
        if why_not is not None and why_not.state == "fixed-upstream":
            return why_not.state, f"{where} already contains the fix ({subject.fixed_in.describe()})", None
        if why_not is not None:
            return why_not.state, f"{where} is outside {spec.versions}", None
        return "unknown", f"{where} is affected; give --python/--root to check the install", apply
    from vllm_hotfix.flow.resolve import Resolver  # here: a log without a target needs no install's state
    from vllm_hotfix.flow.survey import Survey

    try:
        if subject.kind == "advisory":
            target, spec = Resolver(python, root).for_manifest(subject)
            verdict = applicability(subject, spec, target)
            if verdict is not None:
                return verdict.state, verdict.message, None
            return "unknown", f"{target.distribution} {target.version or ''} at {target.root} is affected; no patch exists", apply
        status = Survey(python, Path(root) if root is not None else None, catalog).named([(subject.id, None)])[0]
    except HotfixError as exc:
        return "unknown", exc.message, apply
    if manifest.fixed_by and status.state == "applied" and hotfix_version_key(status.version) < hotfix_version_key(fix_version):
        return "not-applied", f"{subject.id} version {status.version} is applied; this is fixed from {fix_version}", apply
    if status.state in ("applied", "fixed-upstream"):
        detail = status.detail or f"{subject.id}@{status.version} is in effect"
        return status.state, detail, f"hotfix verify {subject.id} {option}".rstrip() if status.state == "applied" else None
    if status.state in ("not-applied", "lost", "unknown"):
        return status.state, status.detail or "", apply
    import re

    first = re.search(r"`([^`]+)`", status.advice or "")  # the status's own first step (stale, interrupted, a restore, ...)
    return status.state, status.detail, first.group(1) if first else (status.advice or "").replace("`", "") or None


def _option(python: str | None, root: Path | None, catalog) -> str:
    """``--python`` / ``--root`` (when given) and the --catalog dirs of this command, quoted, for its next steps."""
    import shlex

    from vllm_hotfix.flow.resolve import catalog_words

    words = ["--root", str(root)] if root is not None else ["--python", python] if python else []
    return " ".join(shlex.quote(w) for w in words + catalog_words(catalog))


def _then(manifest, catalog, *, python: str | None, root: Path | None, catalogs: Sequence[Path]) -> str:
    """The command to run once a "possible" verdict is confirmed, runnable as pasted: the dry run of the
    apply (of the hotfix an advisory is ``fixed_by``; ``hotfix show`` of an advisory without one), with
    the ``--root`` / ``--python`` / ``--catalog`` doctor was given (without either, ``hotfix apply`` takes
    the interpreter ``--python`` defaults to, as doctor's own run would)."""
    from vllm_hotfix.catalog.index import parse_ref

    extra = [arg for directory in catalogs for arg in ("--catalog", str(directory))]
    subject = catalog.get(parse_ref(manifest.fixed_by)[0]) if manifest.fixed_by else manifest
    if subject.kind == "advisory":
        return shlex.join(["hotfix", "show", subject.id, *extra])
    target = ["--root", str(root)] if root is not None else ["--python", python] if python else []
    patch_file = next((["--patch-file", p.external] for p in subject.patches if p.kind == "external"), [])
    return shlex.join(["hotfix", "apply", subject.id, "--dry-run", *target, *extra, *patch_file])


def _tell_apart(manifest) -> tuple[str, ...]:
    """What would make a shared-error match a candidate: its conditions, then its specific evidence."""
    needs = [f"needs: {s.explain}" for s in manifest.signatures if s.tier == "condition"]
    named = [f"named by: {s.explain} ({s.role})" for s in manifest.signatures if s.tier == "specific"]
    return tuple(needs[:2] + named[:2])


def _diagnose(match, *, python: str | None, root: Path | None, catalog, log_versions: dict[str, str],
           catalogs: Sequence[Path] = ()) -> Diagnosis:
    """One match's verdict: its level by evidence tier, and (when confident) its state on the target.

    The log's own release is judged by ``_target_state`` called without a target (the log describes
    the process that crashed): outside the range or fixed there, the hotfix is ruled out whatever the
    target says. A generic error needs a condition of the bug to be a candidate ("possible"); specific
    evidence then needs an in-range release, from the log or the target, to be confident."""
    m = match.manifest
    verdict = dict(id=m.id, version=m.version, kind=m.kind, title=m.title, score=match.score,
                   evidence=match.evidence, vetoes=match.vetoes)
    if match.vetoes:
        return Diagnosis(level="ruled-out", state="", detail=match.vetoes[0].reason, next=None, **verdict)
    dist = m.targets[0].distribution
    if dist in log_versions:
        state, detail, next_cmd = _target_state(m, python=None, root=None, catalog=catalog, log_versions=log_versions)
        if state in OUT_OF_RANGE:
            return Diagnosis(level="ruled-out", state=state, detail=detail, next=None, **verdict)
    if not match.specific and not match.conditions:
        return Diagnosis(level="shared", state="", detail="a generic error alone: no fact of this bug's trigger condition",
                       next=None, tell_apart=_tell_apart(m), **verdict)
    then = _then(m, catalog, python=python, root=root, catalogs=catalogs)
    check = tuple(f"{s.explain} (look for /{s.pattern}/ in a {' or '.join(s.roles)} line)" for s in match.missing)
    if not match.specific:
        return Diagnosis(level="possible", state="", detail="a generic error and a condition of the bug, no specific evidence",
                       next=None, check=check or ("no line in the catalog tells it apart: compare the traceback by hand",),
                       confirm=m.confirm, then=then, **verdict)
    targeted = python is not None or root is not None
    if targeted:
        state, detail, next_cmd = _target_state(m, python=python, root=root, catalog=catalog, log_versions=log_versions)
        if dist not in log_versions and state == "unknown":  # the target could not be judged, the log has no release
            return Diagnosis(level="possible", state=state, detail=detail, next=None,
                           check=(f"the release: {detail}",), then=then, **verdict)
    elif dist not in log_versions:
        return Diagnosis(level="possible", state="unknown", detail="the log does not name its release", next=None,
                       check=(f"the release: give --python/--root (the {dist} install that crashed), or a log with "
                              "its start-up banner",), then=then, **verdict)
    upgrade = None
    if state not in IN_EFFECT and state != "not-applicable" and m.fixed_in is not None and m.fixed_in.first:
        upgrade = f"{m.targets[0].distribution} {m.fixed_in.first}"  # the lowest release fixed_in names
    return Diagnosis(level="confident", state=state, detail=detail, next=next_cmd, upgrade=upgrade, **verdict)


def _disagreements(findings, verdicts: list[Diagnosis], catalog, *, python: str | None, root: Path | None) -> list[str]:
    """Where the log and the --python/--root target name different releases (for the confident matches'
    distributions): the log describes the process that crashed, the target is what would be patched."""
    if python is None and root is None:
        return []
    from vllm_hotfix.flow.resolve import Resolver

    resolver = Resolver(python, Path(root) if root is not None else None)
    lines = []
    wanted = {catalog.get(v.id).targets[0].package: catalog.get(v.id).targets[0].distribution
              for v in verdicts if v.level != "ruled-out" or v.state in OUT_OF_RANGE}
    logged = {d: (v, line) for d, v, line in findings.versions}
    for package, dist in sorted(wanted.items()):
        if dist not in logged:
            continue
        try:
            target = resolver.package(package)
        except HotfixError:
            continue
        version, line = logged[dist]
        if target.version and target.version != version:
            lines.append(f"the log says {dist} {version} ({line.where}) but the target ({'--root' if root else '--python'}) "
                         f"has {dist} {target.version}: the log describes the process that crashed; is this its install?")
    return lines


def _stdin_is_a_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def run(*, logs: Sequence[str], python: str | None, root: Path | None, catalogs: Sequence[Path], as_json: bool,
        show_all: bool) -> int:
    from vllm_hotfix.catalog.index import Catalog
    from vllm_hotfix.doctor import scan
    from vllm_hotfix.doctor.engine import Prefilter, needles_for

    names = list(logs) or ["-"]
    if "-" in names and _stdin_is_a_terminal():
        raise UsageError("no log to read: stdin is a terminal",
                         hint="pipe a log in (docker logs vllm 2>&1 | hotfix doctor -) or name the files: hotfix doctor LOG...")
    catalog = Catalog.load(catalogs)
    manifests = [m for m in catalog.latest() if m.signatures]
    needles = needles_for(manifests)
    kind = prefilter_kind()
    findings = scan(sources(names, needles, kind), manifests, prefilter_=Prefilter(needles, python=kind == "python"))
    log_versions = {dist: version for dist, version, _ in findings.versions}
    judged = [_diagnose(match, python=python, root=root, catalog=catalog, log_versions=log_versions, catalogs=catalogs)
              for match in findings.matches]
    order = {"confident": 0, "possible": 1, "ruled-out": 2}
    verdicts = sorted((v for v in judged if v.level != "shared"), key=lambda v: order[v.level])
    shared = [v for v in judged if v.level == "shared"]
    disagree = _disagreements(findings, verdicts, catalog, python=python, root=root)
    named = [v for v in verdicts if v.named]
    fleet = findings.fingerprint_problem()
    agree = findings.fingerprint_agreement()
    if any(v.state not in IN_EFFECT for v in named) or fleet:
        code = int(ExitCode.NOT_IN_EFFECT)  # a fix is needed, or nodes / ranks do not run the same code
    elif any(v.state in IN_EFFECT for v in named) or (agree and not named):
        code = int(ExitCode.OK)
    else:
        code = int(ExitCode.NO_MATCH)
    if as_json:
        emit_json({"sources": list(findings.sources), "lines": findings.lines, "long_lines": findings.long_lines,
                   "exit_code": code, "log_versions": log_versions, "log_vs_target": disagree,
                   "facts": [{"kind": f.kind, "name": f.name, "value": f.value, "how": f.how, "source": f.line.source,
                              "line": f.line.lineno} for f in findings.facts],
                   "first_errors": [{"source": l.source, "line": l.lineno, "process": l.process, "text": l.raw}
                                    for l in findings.first_errors],
                   "root_errors": [{"source": r.line.source, "line": r.line.lineno, "process": r.line.process,
                                    "text": r.line.raw, "echo": r.echo,
                                    "wrappers": [{"source": w.source, "line": w.lineno, "text": w.raw} for w in r.wrappers]}
                                   for r in findings.root_errors],
                   "verdicts": [v.to_json() for v in verdicts],
                   "shared": [v.to_json() for v in shared],
                   "fingerprints": {"problem": fleet, "agree": {"fingerprint": agree[0], "logs": agree[1]} if agree else None,
                                    "processes": [{"source": l.source, "line": l.lineno, "role": role, "fingerprint": fp}
                                                  for role, fp, l in findings.fingerprints]}})
        return code
    print_report(findings, verdicts, log_versions, disagree, show_all, shared)
    if fleet:
        print_fingerprints(findings, fleet)
    elif agree:
        say()
        say(f"hotfix fingerprints agree on {agree[1]} node{'s' if agree[1] != 1 else ''}: {agree[0]} "
            f"({len(findings.fingerprints)} processes)")
    return code
