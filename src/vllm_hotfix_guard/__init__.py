"""vllm-hotfix-guard: the in-process guard of vllm-hotfix -- everything that runs inside a vLLM process.

Standard library only, and it never imports ``vllm_hotfix`` (the CLI stands on this package, not the other way
round: docs/design.md). ``register`` is the ``vllm.general_plugins`` entry point (the one, named
``vllm_hotfix_guard``): a process without HOTFIX_LOCK / HOTFIX_REQUIRE imports nothing more. ``python -m
vllm_hotfix_guard verify|ready`` are the in-container commands. ``HotfixNotInEffect`` is the public name of the
exception strict mode raises. The same folder ships in the vllm-hotfix wheel and, alone, as the
``vllm-hotfix-guard`` wheel (`hotfix guard --build-dist`, export, bake: docs/guard-travels.md).
"""

__version__ = "0.1.0"

__all__ = ["HotfixNotInEffect", "preflight", "register"]


def register() -> None:
    """The ``vllm.general_plugins`` entry point: cheap unless HOTFIX_LOCK or HOTFIX_REQUIRE is set."""
    import os

    if os.environ.get("HOTFIX_LOCK", "").strip() or os.environ.get("HOTFIX_REQUIRE", "").strip():
        from vllm_hotfix_guard.plugin import register as guard

        guard()


def preflight() -> None:
    """Import now what ``register`` imports in a process with HOTFIX_LOCK / HOTFIX_REQUIRE set (`hotfix guard
    --check-env` calls it after loading the entry point): a guard missing one of its own modules fails there,
    not in every vLLM process."""
    import vllm_hotfix_guard.plugin  # noqa: F401


def __getattr__(name: str):
    if name == "HotfixNotInEffect":  # imported on first use: register() stays cheap
        from vllm_hotfix_guard.verdicts import HotfixNotInEffect

        return HotfixNotInEffect
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
