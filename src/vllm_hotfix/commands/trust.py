"""`hotfix trust rotate`: replace a trust policy by a newer one that its keys signed.

The new policy must have a higher ``version`` and be signed by ``threshold`` keys of the current one
and by ``threshold`` keys of its own (TUF's rule: the old keys vouch for the new ones; the new ones
prove that they are held). Then it replaces the current policy file (atomically, mode 0644; its
signature files copied beside it, the old ones removed), so the old keys stop counting; with
``--chain DIR`` it is also written as ``DIR/policy-<version>.toml`` for the containers whose image
pins an older policy (HOTFIX_TRUST_CHAIN=DIR walks it there).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from vllm_hotfix_guard.errors import UsageError, WriteFailed
from vllm_hotfix_guard.output import emit_json, note, quote_path, say


def run(*, new_policy: Path, trust: Optional[Path], chain: Optional[Path], dry_run: bool, as_json: bool) -> int:
    from vllm_hotfix_guard.core import minisign
    from vllm_hotfix_guard.core import trust_policy as model
    from vllm_hotfix_guard.txn import signed

    current_path = signed.policy_path(trust)
    if current_path is None:
        raise UsageError("name the current trust policy with --trust FILE (or HOTFIX_TRUST)")
    now = time.time()
    _, current = signed.read_policy_file(current_path)
    new_data, new = signed.read_policy_file(Path(new_policy))
    signatures = signed.signature_files(Path(new_policy))
    verdict = model.rotation(current, new_data, new, signatures, now=now, subject=quote_path(str(new_policy)))
    for warning in verdict.warnings:
        note(warning)
    if not verdict.trusted:
        if as_json:
            emit_json({"rotated": False, "trust": verdict.to_json()})
        else:
            for refusal in verdict.refusals:
                say(refusal.line)
        return verdict.exit_code
    valid = [(name, data) for (name, data), check in zip(signatures, verdict.checks)
             if check.outcome == minisign.VALID or _valid_for(new, new_data, name, data)]
    writes = [(current_path, new_data)]
    writes += [(current_path.parent / _renamed(name, Path(new_policy).name, current_path.name), data)
               for name, data in valid]
    if chain is not None:
        step = Path(chain) / signed.chain_name(new.version)
        writes += [(step, new_data)] + [(step.parent / _renamed(name, Path(new_policy).name, step.name), data)
                                        for name, data in valid]
    old_signatures = [current_path.parent / name for name, _ in signed.signature_files(current_path)
                      if name not in {p.name for p, _ in writes}]
    if not dry_run:
        _write(writes, old_signatures, chain)
    if as_json:
        emit_json({"rotated": not dry_run, "dry_run": dry_run, "from_version": current.version,
                   "to_version": new.version, "policy": str(current_path),
                   "written": [str(p) for p, _ in writes], "removed": [str(p) for p in old_signatures],
                   "trust": verdict.to_json()})
        return 0
    verb = "would replace" if dry_run else "replaced"
    say(f"{verb} {quote_path(str(current_path))}: policy version {current.version} -> {new.version}, signed by "
        f"{', '.join(verdict.signers)} of the current keys (threshold {current.threshold})")
    gone = sorted({k.name for k in current.keys} - {k.name for k in new.keys})
    if gone:
        say(f"keys that stop counting: {', '.join(gone)}")
    if chain is not None:
        say(f"{'would write' if dry_run else 'wrote'} {quote_path(str(Path(chain) / signed.chain_name(new.version)))}: "
            f"ship the directory and set HOTFIX_TRUST_CHAIN to it where the image pins an older policy")
    return 0


def _valid_for(policy, data: bytes, name: str, signature: bytes) -> bool:
    """A signature by one of the new policy's own keys (not in the current one): kept beside it too."""
    from vllm_hotfix_guard.core import minisign, trust_policy

    (check,) = trust_policy.check_signatures(data, [(name, signature)], policy)
    return check.outcome == minisign.VALID


def _renamed(signature_name: str, old: str, new: str) -> str:
    """``old.<KEYID>.minisig`` -> ``new.<KEYID>.minisig``."""
    return new + signature_name[len(old):]


def _write(writes: list, remove: list, chain: Optional[Path]) -> None:
    """Signature files first, each policy file last (atomically each): a reader sees the old policy or
    the new one, never a policy without its signatures."""
    from vllm_hotfix_guard.txn.atomic import atomic_write, unlink_if_present

    try:
        if chain is not None:
            Path(chain).mkdir(mode=0o755, parents=True, exist_ok=True)
        for path, data in sorted(writes, key=lambda item: not str(item[0]).endswith(".minisig")):
            atomic_write(Path(path), data, 0o644)
        for path in remove:
            unlink_if_present(path)
    except OSError as exc:
        raise WriteFailed(f"{getattr(exc, 'filename', None) or writes[0][0]}: cannot write: {exc.strerror}",
                          hint="the current policy stays in force until its file is replaced; rerun") from None
