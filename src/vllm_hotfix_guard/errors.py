"""The one exception family the CLI turns into a one-line message and an exit code."""

from __future__ import annotations


class ExitCode:
    """Documented exit codes (docs/exit-codes.md); scripts branch on these. Plain ints in a namespace,
    not an IntEnum: the guard imports this module in every vLLM process, where creating the enum class
    cost 0.3-0.4 ms (docs/design.md, the guard's path)."""

    OK = 0
    NOT_IN_EFFECT = 1  # verify/status/audit: a hotfix is not in effect, an install is not pristine
    USAGE = 2  # bad command line (click's own code)
    REFUSED = 3  # baseline not clean, checksum mismatch, version out of range, precondition, unsafe path
    DOES_NOT_APPLY = 4  # a hunk does not apply (conflict)
    FIXED_UPSTREAM = 5  # the target already contains the upstream fix: nothing to do
    WRITE_FAILED = 6  # a write failed (read-only FS, disk full, permission); everything was restored
    BUSY = 7  # another hotfix process holds the target's lock
    INVALID_INPUT = 8  # malformed diff, manifest or lock file
    NO_MATCH = 9  # doctor: no known issue matches the logs (or only ones for other releases)
    UNAVAILABLE = 10  # the package index or a download failed (network, missing release, sha256 mismatch)
    # a trust policy (HOTFIX_TRUST / --trust) refuses a lock, a catalog or a new policy (core/trust_policy.py)
    UNSIGNED = 11  # no signature file beside it
    UNTRUSTED = 12  # fewer valid signatures from distinct listed keys than the policy's threshold
    TAMPERED = 13  # a listed key's signature or trusted comment does not verify on these bytes
    ROLLBACK = 14  # its version is below the policy's min_version (a policy: not above the current one)
    EXPIRED = 15  # past its `expires` (and past the policy's grace with expired = "warn")
    INTERNAL = 70  # a bug in vllm-hotfix; rerun with HOTFIX_DEBUG=1 for a traceback


class HotfixError(Exception):
    """An expected failure: one line for the user, an exit code for scripts.

    ``hint`` is an optional second line telling what to do next.
    """

    exit_code: int = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class NotInEffect(HotfixError):
    exit_code = ExitCode.NOT_IN_EFFECT


class UsageError(HotfixError):
    exit_code = ExitCode.USAGE


class Refused(HotfixError):
    exit_code = ExitCode.REFUSED


class DoesNotApply(HotfixError):
    exit_code = ExitCode.DOES_NOT_APPLY


class FixedUpstream(HotfixError):
    exit_code = ExitCode.FIXED_UPSTREAM


class WriteFailed(HotfixError):
    exit_code = ExitCode.WRITE_FAILED


class Busy(HotfixError):
    exit_code = ExitCode.BUSY


class InvalidInput(HotfixError):
    exit_code = ExitCode.INVALID_INPUT


class Untrusted(HotfixError):
    """A trust policy refuses what was to be used; ``exit_code`` is the refusal's (11-15)."""

    exit_code = ExitCode.UNTRUSTED


class Unavailable(HotfixError):
    """A package index or download could not be reached or gave bad bytes: nothing about the hotfix."""

    exit_code = ExitCode.UNAVAILABLE
