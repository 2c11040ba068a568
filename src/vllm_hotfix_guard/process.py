"""The guard's view of the process it runs in: does it serve, what is it about to become after a fork,
and where does a line go so that someone sees it. Stdlib only.
"""

from __future__ import annotations

import os
import sys

from vllm_hotfix_guard.settings import STRICT_ENV

LOGGER_NAME = "vllm.vllm_hotfix"  # under "vllm": vLLM's own handler and format

# `vllm SUBCOMMAND`s that serve nothing: strict mode warns there instead of stopping them
NON_SERVING_SUBCOMMANDS = frozenset({"collect-env", "chat", "complete"})
NON_SERVING_FLAGS = frozenset({"-h", "--help", "-v", "--version"})
STRICT_VALUES = ("1", "true", "yes", "on")

_fork_role: str | None = None  # set in a forked child: the multiprocessing.Process it is about to become


def strict() -> bool:
    return os.environ.get(STRICT_ENV, "").strip().lower() in STRICT_VALUES


def set_fork_role(name: str | None) -> None:
    """In a forked child: the name of the process it is about to become (process_role says it)."""
    global _fork_role
    _fork_role = name


def process_role() -> str:
    """Best guess of what this vLLM process is: EngineCore_DP0, VllmWorker-1, ApiServer_0, main."""
    if _fork_role:  # first: in the fork hook, multiprocessing's name is still the parent's
        return _fork_role
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is not None:
        name = multiprocessing.current_process().name
        if name != "MainProcess":
            return name
    if os.environ.get("RANK"):
        return f"rank {os.environ['RANK']}"
    command = " ".join([os.path.basename(os.path.normpath(sys.argv[0])), *sys.argv[1:2]]) if sys.argv and sys.argv[0] else "python"
    return f"main ({command})"


def module_line(module: str, path: str | None, text: str) -> str:
    """One line per watched module import (imports.py)."""
    where = f" from {path}" if path else ""
    return f"vllm-hotfix guard pid={os.getpid()} role={process_role()}: module {module}{where}: {text}"


def forked_process_name() -> str | None:
    """The name of the multiprocessing.Process being forked (the hook runs before it takes its name).
    Only the frame that called os.fork counts: it is multiprocessing's ``Popen._launch`` for a Process,
    while a bare os.fork inside a forked Process still has that Process's ``_launch`` further down."""
    try:
        frame = sys._getframe(2)  # 0 here, 1 the fork hook, 2 whoever called os.fork
    except ValueError:
        return None
    if frame.f_code.co_name != "_launch":
        return None
    process = frame.f_locals.get("process_obj")
    return getattr(process, "name", None) if process is not None else None


def flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass


def serving_process() -> bool:
    """False for a `vllm` command that serves nothing (``--version``, ``--help``, ``collect-env``, ...):
    strict mode stops only processes that can serve or run a model. Anything not recognised serves."""
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is not None and multiprocessing.current_process().name != "MainProcess":
        return True
    argv = sys.argv or []
    if not argv or os.path.basename(os.path.normpath(argv[0])) != "vllm":
        return True
    args = argv[1:]
    if NON_SERVING_FLAGS.intersection(args):
        return False
    subcommand = next((a for a in args if not a.startswith("-")), None)
    return subcommand is not None and subcommand not in NON_SERVING_SUBCOMMANDS


def command_line() -> str:
    return " ".join([os.path.basename(os.path.normpath(sys.argv[0])), *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python"


_FALLBACK_FORMAT = "%(levelname)s %(asctime)s [vllm-hotfix guard] %(message)s"


def emit(level: str, message: str) -> None:
    """Log through vLLM's logger at ``level`` ("INFO", "WARNING", "ERROR"), so the line looks like every
    other vLLM line (vLLM's handler writes to stdout). Where that would say nothing
    (``VLLM_CONFIGURE_LOGGING=0``: no handler at all) or would mix into a command's output
    (``vllm --version``), write the line to stderr ourselves. ``logging`` is imported here, not with the
    module: vLLM has imported it already, and `hotfix verify --lock` imports this module (to prove that
    the guard loads) without ever logging (4.6 ms, measured). Every line passes ``output.visible``
    (the one sanitiser): ids, paths and details from the environment, a lock or a record cannot forge a
    line or drive a terminal. A line that is printable already is what visible returns unchanged (its own
    first test), so the common line costs no import of output (0.35-0.6 ms, measured 2026-12-02)."""
    import logging

    if not message.isprintable():
        from vllm_hotfix_guard.output import visible

        message = visible(message)

    logger, number = logging.getLogger(LOGGER_NAME), getattr(logging, level)
    if logger.hasHandlers() and serving_process():
        logger.log(number, "%s", message, stacklevel=2)
        return
    if not logger.isEnabledFor(number) and logger.hasHandlers():
        return
    caller = sys._getframe(1)
    record = logger.makeRecord(logger.name, number, caller.f_code.co_filename, caller.f_lineno, "%s", (message,), None)
    formatter = next((h.formatter for h in _handlers(logger) if h.formatter is not None), None)
    try:
        text = formatter.format(record) if formatter is not None else None
    except Exception:  # noqa: BLE001 - a formatter expecting vLLM's extra fields
        text = None
    if text is None:
        text = logging.Formatter(_FALLBACK_FORMAT, "%m-%d %H:%M:%S").format(record)
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _handlers(logger) -> list:
    found, current = [], logger
    while current is not None:
        found.extend(current.handlers)
        current = current.parent if current.propagate else None
    return found
