"""The in-process guard: what runs inside every vLLM process (stdlib only, never imports vLLM or torch).

``plugin.register`` is the ``vllm.general_plugins`` entry point; the other modules are its parts (docs/design.md,
"The guard"). ``HotfixNotInEffect`` is the public name of the exception strict mode raises.
"""

from vllm_hotfix_guard.verdicts import HotfixNotInEffect

__all__ = ["HotfixNotInEffect"]
