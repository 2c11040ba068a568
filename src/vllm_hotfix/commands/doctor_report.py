"""`hotfix doctor`'s report in words: the log's facts, first errors, verdicts by level, fingerprints.

Only printing: the verdicts come decided from commands/doctor.py (``Verdict``, ``HEADLINE``).
"""

from __future__ import annotations

from vllm_hotfix.commands.doctor import HEADLINE, OUT_OF_RANGE, Verdict
from vllm_hotfix.output import note, say


def print_fingerprints(findings, problem: str) -> None:
    say()
    say(f"hotfix fingerprints differ across nodes / ranks: {problem}")
    for role, fingerprint, line in findings.fingerprints:
        say(f"   {fingerprint:<20} {line.where} [{role}]")
    note("every node and rank must load the same patched files: run `hotfix verify --lock` on each node "
         "(a node with an old patch not reverted breaks the pair), or bake one image (`hotfix bake`)")


def describe_log(findings, log_versions: dict[str, str]) -> str:
    """'the log says vllm 0.30.0 (vllm, cuda; Glm5Next...; enable_prefix_caching=True, ...)'."""
    parts = []
    engine = findings.engine
    platforms = findings.values("platform")
    if engine or platforms:
        parts.append(", ".join(([engine.value] if engine else []) + sorted(platforms)))
    arch = findings.values("architecture").get("architecture")
    if arch:
        parts.append(arch.value)
    flags = findings.values("flag")
    if flags:
        parts.append(", ".join(f"{name}={fact.value}" for name, fact in flags.items()))
    versions = ", ".join(f"{d} {v}" for d, v in log_versions.items())
    text = f"the log says {versions}" if versions else "the log names no release"
    return text + (f" ({'; '.join(parts)})" if parts else "")


def print_report(findings, verdicts: list[Verdict], log_versions: dict[str, str], disagree: list[str], show_all: bool) -> None:
    say(f"read {findings.lines:,} lines from {len(findings.sources)} log(s); {describe_log(findings, log_versions)}")
    for line in disagree:
        say(f"note: {line}")
    for dist, version, line in findings.version_conflicts()[:3]:
        say(f"note: {line.where} also names {dist} {version} ({line.text[:80]})")
    if findings.long_lines:
        say(f"note: {findings.long_lines} line(s) longer than 8 KB were matched on their first 8 KB only")
    firsts = findings.first_errors if show_all else findings.first_errors[:8]
    if firsts:
        say(f"first error of each process ({len(findings.first_errors)}):")
        for line in firsts:
            say(f"  {line.where} [{line.process}] {line.text[:160]}")
        if len(firsts) < len(findings.first_errors):
            say(f"  ... {len(findings.first_errors) - len(firsts)} more (--all)")
    named = [v for v in verdicts if v.named]
    possible = [v for v in verdicts if v.level == "possible"]
    ruled_out = [v for v in verdicts if v.level == "ruled-out"]
    if not named:
        say("no known issue matches these logs" + (" with specific evidence" if possible else ""))
    for rank, v in enumerate(named, 1):
        say()
        alternative = f" (or upgrade {v.upgrade.replace(' ', ' to ', 1)}, fixed upstream)" if v.upgrade else ""
        say(f"{rank}. {v.id}: {HEADLINE.get(v.state, v.state)}" + (f" → {v.next}{alternative}" if v.next else ""))
        say(f"   {'advisory' if v.kind == 'advisory' else 'hotfix'} @{v.version}: {v.title}")
        say(f"   confident: specific evidence, an in-range release; target: {v.detail}" if v.detail else
            "   confident: specific evidence, an in-range release")
        print_evidence(v)
    if possible:
        say()
        say("possible (generic evidence only, or no release to check): check before applying anything")
        for v in possible:
            say(f"  - {v.id} @{v.version}: {v.title}")
            first = next((e for e in v.evidence), None)
            if first is not None:
                say(f"      seen: {first.line.where}  {first.line.text[:110]}")
            for item in v.check[:3]:
                say(f"      check: {item}")
    if ruled_out:
        say()
        say("ruled out: " + "; ".join(f"{v.id} ({v.detail}" + (f", {v.vetoes[0].line.where}" if v.vetoes else "") + ")"
                                      for v in ruled_out))
    if not named and not any(v.state in OUT_OF_RANGE for v in ruled_out):
        if findings.first_errors:
            note("paste the first error lines above into an issue, or run `hotfix list` to compare by hand")
        else:
            note("no error line was found in these logs: give the log of the process that crashed "
                 "(docker logs CONTAINER 2>&1 keeps stderr), the host's dmesg, or the Ascend plog directory")


def print_evidence(v: Verdict) -> None:
    for e in v.evidence:
        mark = "" if e.signature.confirmed else " (pattern not yet confirmed on a real log)"
        say(f"   {e.signature.tier:<8} {e.signature.role:<11} {e.line.where}  {e.line.text[:120]}")
        say(f"{'':<24}{e.signature.explain}{mark}")
