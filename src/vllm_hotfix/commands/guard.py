"""`hotfix guard`."""

from __future__ import annotations

from vllm_hotfix.errors import HotfixError


def run(**options) -> int:
    raise HotfixError("`hotfix guard` is not implemented yet")
