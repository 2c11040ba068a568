"""`hotfix export`."""

from __future__ import annotations

from vllm_hotfix.errors import HotfixError


def run(**options) -> int:
    raise HotfixError("`hotfix export` is not implemented yet")
