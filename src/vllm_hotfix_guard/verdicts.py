"""What the guard says about one hotfix in one process, and the modules it watches. Stdlib only.

Plain and small on purpose: the guard imports this in every vLLM process (plugin.py and imports.py
share it, so neither imports the other); values.Value, not dataclasses (docs/design.md: the guard's path).
"""

from __future__ import annotations

from vllm_hotfix_guard.values import Value


class HotfixNotInEffect(RuntimeError):
    """Raised in strict mode so that vLLM stops this process before it serves."""


HotfixNotInEffect.__module__ = __package__  # vllm_hotfix_guard (vllm_hotfix_guard delivered): its public name, the one a traceback shows


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


IN_EFFECT, WRAPPED, SHADOWED, STALE_ALIAS, NOT_LOADED = "in effect", "wrapped", "shadowed", "stale-alias", "not loaded"
CODE_STATES = (IN_EFFECT, WRAPPED, SHADOWED, STALE_ALIAS, NOT_LOADED)  # of a fixed name (code.py)
STOPS = frozenset({SHADOWED, STALE_ALIAS})  # strict mode stops a serving process on these
CHECKPOINT = "_vllm_hotfix_checkpoint"  # marks the guard's own wrappers (points.py): transparent to the check


class Locked:
    """One locked name in this process (plain slots: built for every name in every vLLM process)."""

    __slots__ = ("hotfix_id", "module", "qualname", "kind", "fingerprint", "path", "sha256")

    def __init__(self, hotfix_id, module, qualname, kind, fingerprint, path, sha256) -> None:
        self.hotfix_id, self.module, self.qualname, self.kind = hotfix_id, module, qualname, kind
        self.fingerprint, self.path, self.sha256 = fingerprint, path, sha256


class Found:
    """What one locked name is bound to at one point: a state (CODE_STATES), the culprit, the holder."""

    __slots__ = ("locked", "state", "culprit", "holder")

    def __init__(self, locked: Locked, state: str, culprit: str = "", holder: str = "") -> None:
        self.locked, self.state, self.culprit, self.holder = locked, state, culprit, holder
