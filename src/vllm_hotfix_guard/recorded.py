"""The guard's judgement of a required record (HOTFIX_REQUIRE) as `status` and a lock judge it (issue 43:
one verdict in every mode): txn/judgement.judge_record with the record's seal for the derivation and the
catalog's pin where a catalog is at hand (pins.py); then the code check of the names it keeps.

`hotfix apply` keeps in each record the functions, methods and classes its change touches in each Python
file (txn/lockcode.RecordCode, sealed; flow/codenames.step_names: the lock's rule). A record judged in
effect hands them to the guard's code check (code.py, points.py), so a plugin that rebinds the fixed
function is ``shadowed`` under HOTFIX_REQUIRE as under HOTFIX_LOCK. A record written before they were
kept, whose hotfix changes Python files, cannot be checked live: ``unknown``, never "in effect", with the
command that records them (it changes no file). Stdlib only: the guard's path.
"""

from __future__ import annotations

import os

from vllm_hotfix_guard.txn.judgement import Judged
from vllm_hotfix_guard.verdicts import Verdict

CHECKS: list = []  # txn/lockcode.CodeCheck of each required record in effect in this process (plugin.py)
REFUSED: dict = {}  # hotfix id -> the advice, for a record judged unknown as its catalogs are refused (``judge``)


def judge(state, installed, *, bytecode) -> dict:
    """txn/judgement.judge_record on the record of this process's install (``installed``): a pending journal
    is interrupted whatever the record says; the seal instead of the derivation (docs/design.md, "What the
    guard proves"); the pin of the catalog at hand; ``bytecode``: the stale-bytecode rule run here. Where
    the trust policy refuses a HOTFIX_CATALOG directory (pins.at_hand: `hotfix status` refuses to run), every
    hotfix of the record is unknown with that line, and ``with_code`` gives its advice."""
    from vllm_hotfix_guard.pins import at_hand, pinned
    from vllm_hotfix_guard.txn.judgement import bounded_reader, judge_record
    from vllm_hotfix_guard.inputs import TARGET_FILE_LIMIT

    dirs, refusal = at_hand() if any(r.source == "catalog" for r in state.hotfixes.values()) or \
        os.environ.get("HOTFIX_CATALOG") else ([], None)
    judged = judge_record(state, installed, read=bounded_reader(installed.root, TARGET_FILE_LIMIT),
                          pending=installed.pending, derive=False, pinned=pinned(state, installed.version, dirs=dirs),
                          bytecode=bytecode)
    for hotfix_id, j in judged.items():
        REFUSED.pop(hotfix_id, None)
        if refusal is not None:
            from vllm_hotfix_guard.core import verdict

            REFUSED[hotfix_id] = refusal.remedy
            judged[hotfix_id] = Judged(j.hotfix_id, j.version, verdict.UNKNOWN, refusal.detail, j.files, j.installed,
                                       j.distribution, j.release_change)
    return judged


def with_code(result: Verdict, state, hotfix_id: str, judged, *, option: str) -> Verdict:
    """``result`` (the verdict on the record of ``hotfix_id`` in ``state``, judged as ``judged``), with its
    code check added to ``CHECKS`` (txn/lockcode.CodeCheck), or unknown for a record without code names."""
    from vllm_hotfix_guard.core import verdict

    recorded = state.hotfixes[hotfix_id]
    if hotfix_id in REFUSED and not result.in_effect:  # the catalogs at hand are refused: their advice
        return Verdict(result.hotfix_id, False, result.detail, REFUSED[hotfix_id], result.source)
    if not result.in_effect or judged.state != verdict.APPLIED:
        return result
    if recorded.code is not None:
        from vllm_hotfix_guard.txn.lockcode import record_check

        CHECKS.append(record_check(recorded.id, recorded.code, judged.files))
        return result
    if not any(f.path.endswith(".py") for f in recorded.files):
        return result
    return Verdict(recorded.id, False, "unknown: its record keeps no code names (written by an older vllm-hotfix): "
                   "whether the fixed functions are the ones running cannot be checked",
                   f"record them with this version: `{reapply(state, recorded, option)}` (changes no file)", "require")


def reapply(state, recorded, option: str) -> str:
    """The command that re-applies a recorded hotfix in place (its record gains what this version keeps)."""
    import shlex

    if recorded.source == "catalog":
        return f"hotfix apply {recorded.id} {option}"
    return " ".join(shlex.quote(w) for w in (
        "hotfix", "apply", "--patch", str(state.directory / recorded.patches[0]), "-p",
        str(recorded.strip[0] if recorded.strip else 1), "--root", str(state.target.get("root")), "--id", recorded.id))
