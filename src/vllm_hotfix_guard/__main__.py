"""`python -m vllm_hotfix_guard verify [--lock FILE] [--json]` and `... ready ...`: the in-container commands
(in the guard's distribution: `python -m vllm_hotfix_guard verify|ready`). Stdlib only (argparse); errors
as the CLI reports them: one line, its hint, the documented exit code."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in args
    try:
        code = _dispatch(args)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2, its message printed)
        code = exc.code if isinstance(exc.code, int) else 0
    except Exception as exc:  # noqa: BLE001 - one line, as the CLI's cli._run
        code = _report(exc, as_json)
    from vllm_hotfix_guard.output import finish_output

    finish_output()
    return code


def _dispatch(args: list[str]) -> int:
    if args[:1] == ["ready"]:
        try:
            from vllm_hotfix_guard import ready_probe
        except ImportError:
            from vllm_hotfix_guard.output import error_lines

            error_lines("ready: not built into this guard yet", None)
            return 2
        return ready_probe.main(args[1:])
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m {__package__}",
                                     description="The guard's in-container commands (vllm-hotfix).")
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser("verify", help="check the lock (HOTFIX_LOCK or --lock) against this interpreter's "
                                 "install, as `hotfix verify --lock` does")
    verify.add_argument("--lock", metavar="FILE", help="the hotfix.lock (default: $HOTFIX_LOCK)")
    verify.add_argument("--json", action="store_true", help="one JSON document on stdout")
    commands.add_parser("ready", help="exit 0 once every expected vLLM process recorded its hotfixes in effect")
    options = parser.parse_args(args)
    from vllm_hotfix_guard import incontainer

    return incontainer.verify(options.lock, as_json=options.json)


def _report(exc: Exception, as_json: bool) -> int:
    import os

    from vllm_hotfix_guard.errors import ExitCode, HotfixError
    from vllm_hotfix_guard.output import emit_json, error_lines

    if isinstance(exc, HotfixError):
        message, hint, code, kind = exc.message, exc.hint, int(exc.exit_code), type(exc).__name__
    else:
        if os.environ.get("HOTFIX_DEBUG"):
            raise exc
        message, hint = f"internal error: {type(exc).__name__}: {exc}", "rerun with HOTFIX_DEBUG=1 for a traceback and report it"
        code, kind = int(ExitCode.INTERNAL), "InternalError"
    if as_json:
        emit_json({"error": {"kind": kind, "message": message, "hint": hint, "exit_code": code}})
    error_lines(message, hint)
    return code


if __name__ == "__main__":
    sys.exit(main())
