"""What the guard says about one hotfix in one process, and the modules it watches. Stdlib only.

Plain and small on purpose: the guard imports this in every vLLM process (guard.py and guard_imports.py
share it, so neither imports the other); values.Value, not dataclasses (docs/design.md: the guard's path).
"""

from __future__ import annotations

from vllm_hotfix.values import Value


class HotfixNotInEffect(RuntimeError):
    """Raised in strict mode so that vLLM stops this process before it serves."""


class Verdict(Value):
    """The guard's answer for one hotfix id in this process (one part of its one line)."""

    hotfix_id: str
    in_effect: bool
    detail: str = ""  # the state and what is wrong, naming the file (or why it needs nothing: fixed upstream)
    remedy: str = ""  # what to do
    source: str = ""  # where the requirement comes from: "lock", "require", "lock+require"


class Watched(Value):
    """A module a hotfix patched: its import must compile ``sha256`` read from ``path``."""

    module: str
    hotfix_id: str
    path: str
    sha256: str
