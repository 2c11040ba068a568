"""HOTFIX_REQUIRE's half of the guard's verdict (plugin.py assembles both halves): each required id judged on the
record of the copy of its package this process loads. Stdlib only; imported only when HOTFIX_REQUIRE is set."""

from __future__ import annotations

from vllm_hotfix_guard.verdicts import Verdict


def check_required_ids(ids: tuple[str, ...]) -> tuple[list[tuple[Verdict, tuple]], list]:
    """Each id must be recorded as applied (txn/state.py's reader) for the copy of its package this
    process loads (install/facts.py's rule: the same root `hotfix status` keys the record by); which
    record holds it is the guard's own question, the verdict on that record is txn/judgement's, the one
    `hotfix status` gives (without the derivation a sealed record vouches for: docs/design.md).
    Returns the verdicts and the judged hotfixes (for the fingerprint)."""
    from vllm_hotfix_guard.core.docfields import is_record_id
    from vllm_hotfix_guard.errors import HotfixError
    from vllm_hotfix_guard.paths import TargetDir, all_target_dirs, state_dir, targets_dir
    from vllm_hotfix_guard.recorded import CHECKS, judge, with_code
    from vllm_hotfix_guard.txn.state import TargetState
    from vllm_hotfix_guard.install.bytecode import stale_by_source  # in this very process (derive.check_lock)
    from vllm_hotfix_guard.wording import apply_unrecorded, invalid_id, not_importable, python_option, unreadable_state, verdict_of

    states, unreadable = [], []
    CHECKS[:] = ()
    try:
        tdirs = all_target_dirs()
    except OSError as exc:
        tdirs = []
        unreadable.append(f"state folder {targets_dir()}: {exc.strerror}")
    except HotfixError as exc:  # a state directory another user could have written: nothing in it counts
        tdirs = []
        unreadable.append(exc.message)
    for tdir in tdirs:
        try:
            states.append(TargetState.load(tdir.directory))
        except HotfixError as exc:  # unreadable, invalid, or in a folder another user could have written
            unreadable.append(exc.message)
    results: list[tuple[Verdict, tuple]] = []
    judged_by_dir: dict = {}
    from vllm_hotfix_guard.installed import installed as _installed

    judged = []
    for hotfix_id in ids:
        if not is_record_id(hotfix_id):  # an id no record can hold: never looked up, never printed raw
            results.append((invalid_id(hotfix_id), None))
            continue
        holding = [s for s in states if hotfix_id in s.hotfixes]
        if holding:
            recorded = holding[0].hotfixes[hotfix_id]
            package = recorded.package or holding[0].target.get("package") or "vllm"
        else:
            package = "vllm"
        installed = _installed(package)
        if installed is not None and installed.pending and not holding:  # a first apply, interrupted
            results.append((Verdict(hotfix_id, False, f"interrupted: an apply on {installed.root} was interrupted "
                                                      f"and is not recovered", f"run `hotfix recover {python_option()}`",
                                    "require"), None))
            continue
        if not holding:
            if unreadable:  # the record may be in the state we cannot read: say that, not "apply it"
                results.append((unreadable_state(hotfix_id, unreadable), None))
            else:
                results.append((Verdict(hotfix_id, False, f"not-applied: no record of applying it in {state_dir()}",
                                        f"apply it ({apply_unrecorded(hotfix_id)}) or point HOTFIX_STATE_DIR at the "
                                        "state of the install", "require"), None))
            continue
        if installed is None:
            results.append((not_importable(hotfix_id, package, "require"), None))
            continue
        here = next((s for s in holding if s.directory == TargetDir.of(installed.root).directory), None)
        if here is None:
            elsewhere = ", ".join(sorted({str(s.target.get("root")) for s in holding}))
            results.append((Verdict(
                hotfix_id, False,
                f"lost: this process imports {package} from {installed.package_dir}, which has no record of it "
                f"(recorded for {elsewhere})",
                f"remove the PYTHONPATH entry that shadows the patched install, or apply it to this copy "
                f"(`hotfix apply {hotfix_id} --root {installed.root}`)", "require"), None))
            continue
        if here.directory not in judged_by_dir:
            judged_by_dir[here.directory] = judge(here, installed, bytecode=stale_by_source)
        j = judged_by_dir[here.directory][hotfix_id]
        judged.append(j)
        option = python_option(here.hotfixes[hotfix_id].catalog)
        result = verdict_of(hotfix_id, package, j.state, j.detail, j.files, j.installed, "require", option)
        results.append((with_code(result, here, hotfix_id, j, option=option), (hotfix_id, j.files)))
    return results, judged
