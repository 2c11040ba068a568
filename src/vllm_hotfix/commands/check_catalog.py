"""`hotfix check-catalog`."""

from __future__ import annotations

from vllm_hotfix.errors import HotfixError


def run(**options) -> int:
    raise HotfixError("`hotfix check-catalog` is not implemented yet")
