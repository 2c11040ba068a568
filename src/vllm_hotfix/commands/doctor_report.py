"""`hotfix doctor`'s report in words: the log's facts, first errors, verdicts by level, fingerprints.

Only printing: the verdicts come decided from commands/doctor.py (``Diagnosis``, ``HEADLINE`` in commands/doctor_diagnosis.py).
"""

from __future__ import annotations

from vllm_hotfix.commands.doctor_diagnosis import HEADLINE, OUT_OF_RANGE, Diagnosis
from vllm_hotfix_guard.output import note, say


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
    platform = findings.platform
    if engine or platform:
        parts.append(", ".join(([engine.value] if engine else []) + ([platform.name] if platform else [])))
    arch = findings.values("architecture").get("architecture")
    if arch:
        parts.append(arch.value)
    flags = findings.values("flag")
    if flags:
        parts.append(", ".join(f"{name}={fact.value}" for name, fact in flags.items()))
    versions = ", ".join(f"{d} {v}" for d, v in log_versions.items())
    text = f"the log says {versions}" if versions else "the log names no release"
    return text + (f" ({'; '.join(parts)})" if parts else "")


def print_root_errors(findings, show_all: bool) -> None:
    """Each process's root error (its innermost exception), causes before echoes, its wrappers under it."""
    roots = findings.root_errors if show_all else findings.root_errors[:8]
    if not roots:
        return
    say(f"root error of each process ({len(findings.root_errors)}), causes first:")
    for root in roots:
        line = root.line
        say(f"  {line.where} [{line.process}] {line.text[:160]}")
        for wrapper in root.wrappers[:2]:
            say(f"      wrapped by {wrapper.where} {wrapper.text[:120]}")
    if len(roots) < len(findings.root_errors):
        say(f"  ... {len(findings.root_errors) - len(roots)} more (--all)")


def print_possible(v: Diagnosis) -> None:
    say(f"  - {v.id} @{v.version}: {v.title}")
    for e in v.evidence[:3]:
        say(f"      {e.signature.tier:<9} {e.line.where}  {e.line.text[:100]}")
    for item in v.check[:3]:
        say(f"      check: {item}")
    for number, step in enumerate(v.confirm, 1):
        say(f"      confirm {number}. {step.step}")
        say(f"                 → {step.shows}")
    if v.then:
        say(f"      then: {v.then}")


def print_shared(shared: list[Diagnosis]) -> None:
    """Catalog entries whose generic error lines the log shares, without a condition: no candidate."""
    say()
    say(f"not a candidate: {len(shared)} catalog {'entry shares' if len(shared) == 1 else 'entries share'} this log's "
        "generic errors, and the log shows none of their trigger conditions:")
    for v in shared:
        error = next((e for e in v.evidence if e.signature.tier == "generic"), None)
        seen = f" ({error.line.where}: {error.line.text[:80]})" if error is not None else ""
        say(f"  - {v.id}{seen}")
        for item in v.tell_apart:
            say(f"      {item}")


def print_report(findings, verdicts: list[Diagnosis], log_versions: dict[str, str], disagree: list[str], show_all: bool,
                 shared: list[Diagnosis] = ()) -> None:
    say(f"read {findings.lines:,} lines from {len(findings.sources)} log(s); {describe_log(findings, log_versions)}")
    for line in disagree:
        say(f"note: {line}")
    for dist, version, line in findings.version_conflicts()[:3]:
        say(f"note: {line.where} also names {dist} {version} ({line.text[:80]})")
    if findings.long_lines:
        say(f"note: {findings.long_lines} line(s) longer than 8 KB were matched on their first 8 KB only")
    print_root_errors(findings, show_all)
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
        say("possible (a generic error and a condition of the bug, or no release to check): confirm before applying")
        for v in possible:
            print_possible(v)
    if shared:
        print_shared(list(shared))
    if ruled_out:
        say()
        say("ruled out: " + "; ".join(f"{v.id} ({v.detail}" + (f", {v.vetoes[0].line.where}" if v.vetoes else "") + ")"
                                      for v in ruled_out))
    if not named and not possible and not any(v.state in OUT_OF_RANGE for v in ruled_out):
        if findings.root_errors:
            note("paste the root errors above into an issue, or run `hotfix list` to compare by hand")
        else:
            note("no error line was found in these logs: give the log of the process that crashed "
                 "(docker logs CONTAINER 2>&1 keeps stderr), the host's dmesg, or the Ascend plog directory")


def print_evidence(v: Diagnosis) -> None:
    for e in v.evidence:
        mark = "" if e.signature.confirmed else " (pattern not yet confirmed on a real log)"
        say(f"   {e.signature.tier:<9} {e.role or e.signature.role:<12} {e.line.where}  {e.line.text[:120]}")
        say(f"{'':<26}{e.signature.explain}{mark}")
