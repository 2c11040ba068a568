"""`hotfix doctor [LOG ...]`: from a crash log to the hotfix (or advisory) that fixes it.

Reads the logs (files, ``-`` for stdin, ``.gz`` by content) in blocks of whole lines, prefiltered by
``grep -F`` when there is one (else by the engine's own ``bytes.find``), hands them to the pure engine
(``vllm_hotfix.doctor``), then joins each named match with the target in ONE place,
``_target_state``, which asks the code `hotfix status` uses. Exit codes: 1 a matched hotfix is needed
(not applied, lost, drifted, or its state unknown), 0 every matched one is already in effect (applied,
fixed upstream), 9 nothing known matches (or only for other releases).
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Sequence

from vllm_hotfix.errors import ExitCode, HotfixError, UsageError
from vllm_hotfix.output import emit_json, note, say

BLOCK = 8 << 20  # bytes read at a time: the engine sees whole lines, the file is never held
NEEDED = ("not-applied", "lost", "drifted", "unknown")
IN_EFFECT = ("applied", "fixed-upstream")
HEADLINE = {"not-applied": "needed, not applied", "lost": "needed, lost (recorded, but the files are back to baseline)",
            "drifted": "needed, drifted (a touched file was changed)", "unknown": "needed? state unknown",
            "applied": "already applied", "fixed-upstream": "fixed upstream", "not-applicable": "not applicable"}


@dataclass(frozen=True)
class Verdict:
    """What doctor concludes for one matching hotfix on this target."""

    id: str
    version: int | str
    kind: str
    title: str
    score: float
    confidence: str
    named: bool
    state: str
    detail: str
    next: str | None
    evidence: tuple  # of engine Evidence
    upgrade: str | None = None  # "vllm 0.32.0": the release with the fix, the alternative to a patch

    def to_json(self) -> dict:
        return {"id": self.id, "version": self.version, "kind": self.kind, "title": self.title, "named": self.named,
                "score": self.score, "confidence": self.confidence, "state": self.state, "detail": self.detail,
                "next": self.next, "upgrade": self.upgrade, "evidence": [
                    {"source": e.line.source, "line": e.line.lineno, "process": e.line.process,
                     "role": e.signature.role, "weight": e.signature.weight, "text": e.line.raw, "normalised": e.line.text,
                     "explain": e.signature.explain} for e in self.evidence]}


def blocks(stream: BinaryIO, size: int = BLOCK) -> Iterator[bytes]:
    """Chunks of whole lines (the last one may lack its newline)."""
    rest = b""
    while True:
        data = stream.read(size)
        if not data:
            if rest:
                yield rest
            return
        data = rest + data
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            rest = data
            continue
        rest = data[cut:]
        yield data[:cut]


def _open(name: str) -> tuple[str, BinaryIO, BinaryIO]:
    """(label, the stream of log bytes, the file to close); gzip is recognised by its magic bytes."""
    if name == "-":
        if sys.stdin is None:  # `<&-`: there is no standard input at all
            raise UsageError("-: standard input is closed, there is no log to read",
                             hint="pipe the log in (docker logs vllm 2>&1 | hotfix doctor -) or name the log files")
        raw: BinaryIO = sys.stdin.buffer
        label = "<stdin>"
    else:
        try:
            raw = open(name, "rb")  # noqa: SIM115 - closed by _sources
        except OSError as exc:
            raise UsageError(f"{name}: cannot read: {exc.strerror or exc}") from None
        label = name
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    stream = gzip.GzipFile(fileobj=raw) if head == b"\x1f\x8b" else raw
    return label, stream, raw  # type: ignore[return-value]


def _sources(names: Sequence[str], needles: tuple[bytes, ...]) -> Iterator[tuple[str, Iterator]]:
    for name in names:
        label, stream, raw = _open(name)
        try:
            yield label, _checked(label, _parts(stream, needles))
        finally:
            if raw is not sys.stdin.buffer:
                raw.close()


def _parts(stream: BinaryIO, needles: tuple[bytes, ...], grep: str | None = None) -> Iterator:
    """The log as the engine takes it: blocks of whole lines, or, where a ``grep`` binary exists,
    prefiltered batches: ``grep -F`` (Aho-Corasick in C) finds the lines holding a needle while this
    process only copies the bytes into its pipe and counts the lines. Same result either way."""
    grep = grep if grep is not None else os.environ.get("HOTFIX_DOCTOR_GREP", shutil.which("grep") or "")
    if not grep:
        yield from blocks(stream)
        return
    from vllm_hotfix.doctor.engine import Prefiltered

    argv = [grep, "-F", "-n", "-a"] + [arg for needle in needles for arg in (b"-e", needle)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, "LC_ALL": "C"})
    counted: list[int] = []
    failure: list[BaseException] = []

    def pump() -> None:  # a thread: grep's output is read below while its input is written here
        lines = 0
        try:
            for chunk in blocks(stream):
                lines += chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
                proc.stdin.write(chunk)
        except BrokenPipeError:
            pass
        except BaseException as exc:  # noqa: BLE001 - re-raised in the reading thread
            failure.append(exc)
        finally:
            counted.append(lines)
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass

    writer = threading.Thread(target=pump, daemon=True)
    writer.start()
    base, batch = 0, []
    try:
        for out in proc.stdout:
            number, _, text = out.partition(b":")
            batch.append((int(number) - 1 - base, text.rstrip(b"\n")))
            if len(batch) >= 10_000:
                last = int(number)
                yield Prefiltered(tuple(batch), last - base)
                base, batch = last, []
        writer.join()
        if failure:
            raise failure[0]
        if proc.wait() > 1:
            raise UsageError(f"{grep} failed (exit {proc.returncode}) while prefiltering the log",
                             hint="HOTFIX_DOCTOR_GREP= (empty) makes doctor search in Python")
        yield Prefiltered(tuple(batch), counted[0] - base)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        writer.join()


def _checked(label: str, parts: Iterator) -> Iterator:
    try:
        yield from parts
    except (OSError, EOFError) as exc:  # a truncated or corrupt .gz
        raise UsageError(f"{label}: cannot read: {exc}") from None


def _target_state(manifest, *, python: str | None, root: Path | None, catalog,
                  log_versions: dict[str, str]) -> tuple[str, str, str | None]:
    """(state word, detail, the one command to run next) for a matched manifest on the target.

    The ONE place doctor joins with an install: it asks what `hotfix status` asks (flow.status.Survey,
    flow.resolve.Resolver, flow.applicability) and never decides a state itself. An advisory
    ``fixed_by`` a catalog hotfix takes that hotfix's state. Without --python/--root no install is
    looked at: the release the log names decides only fixed-upstream / not-applicable, else unknown.
    """
    from vllm_hotfix.catalog.index import parse_ref, version_key
    from vllm_hotfix.flow.applicability import applicability
    from vllm_hotfix.flow.resolve import Resolver
    from vllm_hotfix.flow.status import Survey

    fix_id, fix_version = parse_ref(manifest.fixed_by) if manifest.fixed_by else (manifest.id, None)
    subject = catalog.get(fix_id) if manifest.fixed_by else manifest
    option = f"--root {root}" if root is not None else f"--python {python}" if python else None
    dist = subject.targets[0]
    apply = (f"hotfix apply {subject.id} {option or ('--root DIR' if dist.git else '--python PY')}"
             + (" --patch-file PATH" if any(p.kind == "external" for p in subject.patches) else ""))
    if subject.kind == "advisory":
        apply = f"follow the workaround (hotfix show {manifest.id})"
    if option is None:
        version = log_versions.get(dist.distribution)
        if version is None:
            return "unknown", "no --python/--root given and the log does not name its release", apply
        where = f"the log's {dist.distribution} {version}"
        if subject.is_fixed_in(version):
            return "fixed-upstream", f"{where} already contains the fix ({subject.fixed_in.describe()})", None
        if not dist.contains(version):
            return "not-applicable", f"{where} is outside {dist.versions}", None
        return "unknown", f"{where} is affected; give --python/--root to check the install", apply
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
    if manifest.fixed_by and status.state == "applied" and version_key(status.version) < version_key(fix_version):
        return "not-applied", f"{subject.id} version {status.version} is applied; this is fixed from {fix_version}", apply
    if status.state in ("applied", "fixed-upstream"):
        detail = status.detail or f"{subject.id}@{status.version} is in effect"
        return status.state, detail, f"hotfix verify {subject.id} {option}" if status.state == "applied" else None
    if status.state in ("not-applied", "lost", "unknown"):
        return status.state, status.detail or "", apply
    return status.state, status.detail, (status.advice or "").replace("`", "") or None


def run(*, logs: Sequence[str], python: str | None, root: Path | None, catalogs: Sequence[Path], as_json: bool,
        show_all: bool) -> int:
    from vllm_hotfix.catalog.index import Catalog
    from vllm_hotfix.doctor import scan

    from vllm_hotfix.doctor.engine import needles_for

    catalog = Catalog.load(catalogs)
    manifests = [m for m in catalog.latest() if m.signatures]
    findings = scan(_sources(list(logs) or ["-"], needles_for(manifests)), manifests)
    log_versions = {dist: version for dist, version, _ in findings.versions}
    verdicts = []
    for match in findings.matches:
        m = match.manifest
        state, detail, next_cmd, upgrade = ("", "", None, None)
        if match.named:
            state, detail, next_cmd = _target_state(m, python=python, root=root, catalog=catalog, log_versions=log_versions)
            if state in NEEDED and m.fixed_in is not None and m.fixed_in.version:
                upgrade = f"{m.targets[0].distribution} {m.fixed_in.version}"
        verdicts.append(Verdict(m.id, m.version, m.kind, m.title, match.score, match.confidence, match.named,
                                state, detail, next_cmd, match.evidence, upgrade))
    named = [v for v in verdicts if v.named]
    if any(v.state in NEEDED for v in named):
        code = int(ExitCode.NOT_IN_EFFECT)
    elif any(v.state in IN_EFFECT for v in named):
        code = int(ExitCode.OK)
    else:
        code = int(ExitCode.NO_MATCH)
    fleet = findings.fingerprint_problem()
    if fleet and code != int(ExitCode.NOT_IN_EFFECT):
        code = int(ExitCode.NOT_IN_EFFECT)  # nodes or ranks do not run the same code
    if as_json:
        emit_json({"sources": list(findings.sources), "lines": findings.lines, "exit_code": code,
                   "log_versions": log_versions,
                   "first_errors": [{"source": l.source, "line": l.lineno, "process": l.process, "text": l.raw}
                                    for l in findings.first_errors],
                   "verdicts": [v.to_json() for v in verdicts],
                   "fingerprints": {"problem": fleet, "processes": [
                       {"source": l.source, "line": l.lineno, "role": role, "fingerprint": fp}
                       for role, fp, l in findings.fingerprints]}})
        return code
    _print(findings, verdicts, log_versions, show_all)
    if fleet:
        _print_fingerprints(findings, fleet)
    return code


def _print_fingerprints(findings, problem: str) -> None:
    say()
    say(f"hotfix fingerprints differ across nodes / ranks: {problem}")
    for role, fingerprint, line in findings.fingerprints:
        say(f"   {fingerprint:<20} {line.where} [{role}]")
    note("every node and rank must load the same patched files: run `hotfix verify --lock` on each node "
         "(a node with an old patch not reverted breaks the pair), or bake one image (`hotfix bake`)")


def _print(findings, verdicts: list[Verdict], log_versions: dict[str, str], show_all: bool) -> None:
    versions = ", ".join(f"{d} {v}" for d, v in log_versions.items())
    say(f"read {findings.lines:,} lines from {len(findings.sources)} log(s)" + (f"; the log says {versions}" if versions else ""))
    firsts = findings.first_errors if show_all else findings.first_errors[:8]
    if firsts:
        say(f"first error of each process ({len(findings.first_errors)}):")
        for line in firsts:
            say(f"  {line.where} [{line.process}] {line.text[:160]}")
        if len(firsts) < len(findings.first_errors):
            say(f"  ... {len(findings.first_errors) - len(firsts)} more (--all)")
    named = [v for v in verdicts if v.named]
    if not named:
        say("no known issue matches these logs")
    for rank, v in enumerate(named, 1):
        say()
        alternative = f" (or upgrade {v.upgrade.replace(' ', ' to ', 1)}, fixed upstream)" if v.upgrade else ""
        say(f"{rank}. {v.id}: {HEADLINE.get(v.state, v.state)}" + (f" → {v.next}{alternative}" if v.next else ""))
        say(f"   {'advisory' if v.kind == 'advisory' else 'hotfix'} @{v.version}: {v.title}")
        say(f"   confidence {v.confidence} (score {v.score:g}); target: {v.detail}" if v.detail else
            f"   confidence {v.confidence} (score {v.score:g})")
        for e in v.evidence:
            say(f"   {e.signature.role:<11} {e.signature.weight:+.1f}  {e.line.where}  {e.line.text[:120]}")
            say(f"                      {e.signature.explain}")
    weak = [v for v in verdicts if not v.named]
    if weak:
        say()
        say("not enough evidence (a first error matches, the context does not): "
            + ", ".join(f"{v.id} (score {v.score:g})" for v in weak))
    if not named:
        note("paste the first error lines above into an issue, or run `hotfix list` to compare by hand")
