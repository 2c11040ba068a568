"""The pod's own proof, for ``ready`` (vllm_hotfix_guard/ready.py): the mounted lock is the one the pod was admitted
with. k8s sets HOTFIX_EXPECT_FINGERPRINT from the pod's ``vllm-hotfix.io/fingerprint`` annotation (the
downward API), the annotation `hotfix k8s --admission`'s policy approves; ``ready`` is not ready while
HOTFIX_LOCK's fingerprint (txn.lock_check.expected_fingerprint, what `hotfix pack` labels a bundle with)
is another. Stdlib only; imported by ``ready`` only when the variable is set.
"""

from __future__ import annotations

import os

from vllm_hotfix_guard.ready_io import LOCK_LIMIT, quote, read_small
from vllm_hotfix_guard.settings import EXPECT_FINGERPRINT_ENV, LOCK_ENV


def fingerprint_problems() -> list[str]:
    """With HOTFIX_EXPECT_FINGERPRINT set (k8s: from the pod's fingerprint annotation, the one admission
    approved), one line unless HOTFIX_LOCK's fingerprint (txn.lock_check.expected_fingerprint) is that one:
    the mounted lock is not what the pod was admitted with. Nothing to say when it is unset."""
    wanted = os.environ.get(EXPECT_FINGERPRINT_ENV, "").strip()
    if not wanted:
        return []
    path = os.environ.get(LOCK_ENV, "").strip()
    what = f"fingerprint: the pod expects {quote(wanted)} ({EXPECT_FINGERPRINT_ENV})"
    if not path or "\x00" in path:
        return [f"{what}, but {LOCK_ENV} names no lock"]
    try:
        data = read_small(path, LOCK_LIMIT)
        if data is None:
            return [f"{what}, but the lock {quote(path)} is missing"]
        from vllm_hotfix_guard.txn.hotfix_lock import parse_lock
        from vllm_hotfix_guard.txn.lock_check import expected_fingerprint

        found = expected_fingerprint(parse_lock(data, source=path))
    except Exception as exc:  # an unreadable or invalid lock: not ready, never a traceback
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        return [f"{what}, but the lock {quote(path)} cannot be read: {quote(why)}"]
    if found != wanted:
        return [f"{what}, but the mounted lock {quote(path)} has fingerprint {quote(found)}"]
    return []
