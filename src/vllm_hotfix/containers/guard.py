"""The guard's old entry point, kept for images whose installed metadata still names it.

``vllm_hotfix.containers.guard:register`` was the ``vllm.general_plugins`` entry point before the guard got its
own package (``vllm_hotfix_guard``); an image built then keeps working, and ``HotfixNotInEffect`` is still
importable from here.
"""

from vllm_hotfix_guard import HotfixNotInEffect
from vllm_hotfix_guard.plugin import register

__all__ = ["HotfixNotInEffect", "register"]
