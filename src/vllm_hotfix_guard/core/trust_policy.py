"""Who must have signed a lock, a catalog or a newer policy: the trust policy and the one verdict on it.

Pure and stdlib only: ``evaluate`` takes bytes and a time and does no I/O, so `hotfix verify --lock`,
the catalog loader, `hotfix trust rotate` and (issue 36 part B) the guard ask the same function.
The files are read by ``txn/signed.py``.

The policy (TOML, read by core.policytoml on every Python)::

    version = 1               # this policy's own counter: a rotation must raise it
    threshold = 2             # valid signatures needed, each from a distinct listed key
    min_version = 7           # refuse locks whose `version` is lower (rollback)
    expired = "warn"          # what an expired lock gets: "fail" (default) or "warn" ...
    grace = "72h"             # ... for this long after `expires`, then "fail" (s, m, h, d, w)
    catalogs = "signed"       # user catalogs must be signed too ("any": default)
    [[keys]]
    name = "release-team"
    minisign = "RWQ..."       # the key line of a minisign .pub file

A verdict names each refusal on its own line, with its exit code (errors.ExitCode): UNSIGNED (no
signature file), UNTRUSTED (fewer than ``threshold`` distinct listed keys), TAMPERED (a listed key's
signature fails on these bytes and the threshold is not met), ROLLBACK (``version`` below
``min_version``), EXPIRED (past ``expires``, past its grace with ``expired = "warn"``); and warnings
(expired within its grace, signatures that do not count).
"""

from __future__ import annotations

from typing import Optional, Sequence

from vllm_hotfix_guard.core import minisign
from vllm_hotfix_guard.core.policytoml import loads
from vllm_hotfix_guard.core.signames import MAX_SIGNATURES
from vllm_hotfix_guard.core.utctime import format_utc, parse_utc  # noqa: F401 - trust_policy's API too
from vllm_hotfix_guard.errors import ExitCode, InvalidInput
from vllm_hotfix_guard.values import Value

POLICY_LIMIT = 64 << 10  # a policy lists a few keys; 64 KiB is far more than any
MAX_KEYS = 64

UNSIGNED = "unsigned"
UNTRUSTED = "untrusted"
TAMPERED = "tampered"
ROLLBACK = "rollback"
EXPIRED = "expired"
EXIT_CODES = {TAMPERED: ExitCode.TAMPERED, UNSIGNED: ExitCode.UNSIGNED, UNTRUSTED: ExitCode.UNTRUSTED,
              ROLLBACK: ExitCode.ROLLBACK, EXPIRED: ExitCode.EXPIRED}  # in this order when several apply

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_POLICY_KEYS = ("version", "threshold", "min_version", "expired", "grace", "catalogs", "keys")


class TrustedKey(Value):
    name: str
    key: minisign.PublicKey


class Policy(Value):
    """A validated trust policy."""

    threshold: int
    keys: tuple  # of TrustedKey, names and key ids distinct
    version: int = 1
    min_version: int = 0
    expired: str = "fail"  # "fail" | "warn"
    grace: Optional[int] = None  # seconds; with expired = "warn" only (None: warn without end)
    catalogs: str = "any"  # "any" | "signed"
    source: str = ""

    def key_for(self, key_id: bytes) -> Optional[TrustedKey]:
        for trusted in self.keys:
            if trusted.key.key_id == key_id:
                return trusted
        return None


class SignatureCheck(Value):
    """One signature file beside the signed file, and what it is worth under the policy."""

    file: str  # its base name
    outcome: str  # a core.minisign outcome, "unlisted" (no key of the policy) or "malformed"
    key_id: str = ""
    key_name: Optional[str] = None
    trusted_comment: str = ""
    problem: str = ""  # for "malformed": why

    def to_json(self) -> dict:
        return self.as_dict()


class Refusal(Value):
    kind: str  # UNSIGNED, UNTRUSTED, TAMPERED, ROLLBACK, EXPIRED
    line: str

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.kind]


class TrustDecision(Value):
    """The policy's answer for one signed file."""

    subject: str  # what was judged, for the lines ("hotfix.lock", "catalog ./my-catalog")
    signers: tuple  # names of the listed keys whose signatures count, policy order
    threshold: int
    checks: tuple  # of SignatureCheck
    refusals: tuple = ()  # of Refusal
    warnings: tuple = ()  # of str
    version: Optional[int] = None
    expires: Optional[str] = None

    @property
    def trusted(self) -> bool:
        return not self.refusals

    @property
    def exit_code(self) -> int:
        """The first refusal's code in EXIT_CODES' order; 0 when trusted."""
        kinds = {r.kind for r in self.refusals}
        return next((code for kind, code in EXIT_CODES.items() if kind in kinds), 0)

    def summary(self) -> str:
        """One line: who signed, against which threshold (and the version and expiry when known)."""
        signed = ", ".join(self.signers) or "no listed key"
        extra = "".join((f", version {self.version}" if self.version is not None else "",
                         f", expires {self.expires}" if self.expires else ""))
        return f"{self.subject}: signed by {signed} ({len(self.signers)} of threshold {self.threshold}){extra}"

    def to_json(self) -> dict:
        return {"subject": self.subject, "trusted": self.trusted, "exit_code": self.exit_code,
                "signers": list(self.signers), "threshold": self.threshold, "version": self.version,
                "expires": self.expires, "refusals": [{"kind": r.kind, "line": r.line, "exit_code": r.exit_code}
                                                       for r in self.refusals],
                "warnings": list(self.warnings), "signatures": [c.to_json() for c in self.checks]}


# -- the policy ------------------------------------------------------------------------------------


def parse_policy(data: bytes, source: str) -> Policy:
    """The policy in ``data``; InvalidInput (exit 8) naming the key path for anything off."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{source}: not UTF-8 text (byte {exc.start})") from None
    if text.startswith("\ufeff"):
        raise InvalidInput(f"{source}: starts with a byte-order mark; save it as plain UTF-8")
    doc = loads(text, source)

    def fail(where: str, problem: str) -> InvalidInput:
        return InvalidInput(f"{source}: {where}: {problem}")

    unknown = [k for k in doc if k not in _POLICY_KEYS]
    if unknown:
        raise fail(unknown[0], f"unknown key (allowed: {', '.join(_POLICY_KEYS)})")

    def integer(key: str, default: Optional[int], low: int) -> int:
        value = doc.get(key, default)
        if value is None:
            raise fail(key, "missing required key")
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail(key, f"expected an integer, got {_kind(value)}")
        if value < low:
            raise fail(key, f"must be at least {low}, got {value}")
        return value

    def choice(key: str, default: str, allowed: tuple) -> str:
        value = doc.get(key, default)
        if value not in allowed:
            raise fail(key, f"expected one of {', '.join(repr(a) for a in allowed)}, got {value!r}")
        return value

    keys_doc = doc.get("keys")
    if not isinstance(keys_doc, list) or not keys_doc:
        raise fail("keys", "needs at least one [[keys]] table" if keys_doc is None or keys_doc == []
                   else f"expected [[keys]] tables, got {_kind(keys_doc)}")
    if len(keys_doc) > MAX_KEYS:
        raise fail("keys", f"{len(keys_doc)} keys; a policy lists at most {MAX_KEYS}")
    keys: list[TrustedKey] = []
    for index, entry in enumerate(keys_doc):
        where = f"keys[{index}]"
        if not isinstance(entry, dict):
            raise fail(where, f"expected a table, got {_kind(entry)}")
        extra = [k for k in entry if k not in ("name", "minisign")]
        if extra:
            raise fail(f"{where}.{extra[0]}", "unknown key (allowed: name, minisign)")
        name = entry.get("name")
        if not isinstance(name, str) or not _is_name(name):
            raise fail(f"{where}.name", "missing" if name is None else
                       f"expected a name of letters, digits, '.', '_', '-' (at most 64), got {name!r}")
        line = entry.get("minisign")
        if not isinstance(line, str):
            raise fail(f"{where}.minisign", "missing" if line is None else f"expected a string, got {_kind(line)}")
        try:
            key = minisign.parse_public_key(line, f"{where}.minisign")
        except InvalidInput as exc:
            raise InvalidInput(f"{source}: {exc.message}") from None
        for other_index, other in enumerate(keys):
            clash = _clash(other, name, key, other_index)
            if clash:
                raise fail(f"{where}.{clash[0]}", clash[1])
        keys.append(TrustedKey(name=name, key=key))
    threshold = integer("threshold", None, 1)
    if threshold > len(keys):
        raise fail("threshold", f"{threshold} signatures needed but only {len(keys)} key(s) listed")
    expired = choice("expired", "fail", ("fail", "warn"))
    grace = None
    if "grace" in doc:
        if expired != "warn":
            raise fail("grace", 'only with expired = "warn" (a grace before "warn" turns into "fail")')
        value = doc["grace"]
        grace = parse_duration(value) if isinstance(value, str) else None
        if grace is None:
            raise fail("grace", f"expected a duration such as \"72h\" (units s, m, h, d, w), got {value!r}")
    return Policy(threshold=threshold, keys=tuple(keys), version=integer("version", 1, 1),
                  min_version=integer("min_version", 0, 0), expired=expired, grace=grace,
                  catalogs=choice("catalogs", "any", ("any", "signed")), source=source)


def _is_name(value: str) -> bool:
    return 0 < len(value) <= 64 and value.isascii() and value[0].isalnum() and all(
        c.isalnum() or c in "._-" for c in value)


def _kind(value) -> str:
    return {bool: "a boolean", int: "an integer", str: "a string", list: "an array", dict: "a table"}.get(
        type(value), type(value).__name__)


def parse_duration(text: str) -> Optional[int]:
    """'72h', '30m', '7d', '2w', '90s' -> seconds; None for anything else (a unit is required)."""
    text = text.strip()
    number, unit = text[:-1], text[-1:]
    if unit not in _UNITS or not number.isdigit() or not number.isascii() or len(number) > 9:
        return None
    return int(number) * _UNITS[unit]


# -- the verdict -----------------------------------------------------------------------------------


def check_signatures(message: bytes, signatures: Sequence[tuple[str, bytes]], policy: Policy) -> tuple:
    """Each signature file (base name, bytes) checked against the policy's keys: SignatureCheck's."""
    checks = []
    for name, data in signatures:
        try:
            signature = minisign.parse_signature(data, name)
        except InvalidInput as exc:
            checks.append(SignatureCheck(file=name, outcome="malformed", problem=exc.message))
            continue
        trusted = policy.key_for(signature.key_id)
        outcome = "unlisted" if trusted is None else minisign.check(signature, trusted.key, message)
        checks.append(SignatureCheck(file=name, outcome=outcome, key_id=signature.key_id_text,
                                     key_name=trusted.name if trusted else None,
                                     trusted_comment=signature.trusted_comment))
    return tuple(checks)


def _clash(other: TrustedKey, name: str, key: minisign.PublicKey, index: int) -> Optional[tuple[str, str]]:
    """(field, why) when a listed key repeats ``keys[index]``'s name, key id or public key, else None."""
    if other.name == name:
        return "name", f"{name!r} is also keys[{index}].name"
    if other.key.key_id == key.key_id:
        return "minisign", f"key id {key.id_text} is also keys[{index}]'s"
    if other.key.key == key.key:  # the key id is not signed: one key under two ids would count twice
        return "minisign", f"the public key of keys[{index}] under another key id: a threshold counts distinct keys"
    return None


def evaluate(message: bytes, signatures: Sequence[tuple[str, bytes]], policy: Policy, *, now: float,
             subject: str, version: Optional[int] = None, expires: Optional[str] = None,
             versioned: bool = True) -> TrustDecision:
    """The policy's verdict on ``message`` (the signed file's exact bytes) with these signature files.
    ``version`` / ``expires`` are the signed file's own fields (a lock's), counted only once the
    signatures are; ``versioned=False`` (a catalog, a policy) skips min_version and expiry."""
    checks = check_signatures(message, signatures[:MAX_SIGNATURES], policy)
    counted = {c.key_name for c in checks if c.outcome == minisign.VALID}
    distinct: dict[bytes, str] = {}  # one public key counts once, whatever key id names it
    for k in policy.keys:
        if k.name in counted:
            distinct.setdefault(k.key.key, k.name)
    signers = tuple(distinct.values())
    refusals: list[Refusal] = []
    warnings: list[str] = []
    failed = [c for c in checks if c.outcome in (minisign.BAD_SIGNATURE, minisign.BAD_COMMENT)]
    if len(signatures) > MAX_SIGNATURES:
        warnings.append(f"{subject}: {len(signatures)} signature files; only the first {MAX_SIGNATURES} were read")
    for c in checks:
        if c.outcome == minisign.VALID:
            continue
        why = {minisign.BAD_SIGNATURE: f"{c.key_name}'s signature does not verify: the signed bytes changed",
               minisign.BAD_COMMENT: f"{c.key_name}'s trusted comment was changed after signing",
               minisign.LEGACY: "a legacy (non-prehashed, minisign -l) signature: not accepted; sign again without -l",
               "unlisted": f"made by key {c.key_id}, which the policy does not list",
               "malformed": c.problem or "not a minisign signature"}.get(c.outcome, c.outcome)
        if not (c.outcome in (minisign.BAD_SIGNATURE, minisign.BAD_COMMENT) and len(signers) < policy.threshold):
            warnings.append(f"{c.file}: does not count: {why}")
    if len(signers) < policy.threshold:
        if failed:
            for c in failed:
                what = "signature" if c.outcome == minisign.BAD_SIGNATURE else "trusted comment"
                refusals.append(Refusal(TAMPERED, f"TAMPERED: {subject}: {c.key_name}'s {what} does not verify "
                                                  f"({c.file}): the {'bytes' if what == 'signature' else 'comment'} "
                                                  f"changed after signing"))
        elif not signatures:
            refusals.append(Refusal(UNSIGNED, f"UNSIGNED: {subject}: no signature file; the trust policy "
                                              f"{policy.source} needs {policy.threshold}"))
        else:
            refusals.append(Refusal(UNTRUSTED, f"UNTRUSTED: {subject}: {len(signers)} valid signature(s) from listed "
                                               f"keys ({', '.join(signers) or 'none'}), the policy needs "
                                               f"{policy.threshold}"))
    if versioned and not refusals:
        if (version or 0) < policy.min_version:
            refusals.append(Refusal(ROLLBACK, f"ROLLBACK: {subject}: version {version or 0} is below the policy's "
                                              f"min_version {policy.min_version}"))
        limit = parse_utc(expires) if expires else None
        if limit is not None and now >= limit:
            late = now - limit
            if policy.expired == "warn" and (policy.grace is None or late < policy.grace):
                left = "" if policy.grace is None else f"; refused in {_age(policy.grace - late)}"
                warnings.append(f"EXPIRED: {subject}: expired at {expires} ({_age(late)} ago){left}")
            else:
                grace = f", past its grace of {_age(policy.grace)}" if policy.grace is not None else ""
                refusals.append(Refusal(EXPIRED, f"EXPIRED: {subject}: expired at {expires} ({_age(late)} ago{grace})"))
    return TrustDecision(subject=subject, signers=signers, threshold=policy.threshold, checks=checks,
                   refusals=tuple(refusals), warnings=tuple(warnings), version=version, expires=expires)


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}" + (f" {seconds % size // 3600}h" if unit == "d" and seconds % size >= 3600
                                                 else "")
    return f"{seconds}s"


def rotation(current: Policy, new_bytes: bytes, new: Policy, signatures: Sequence[tuple[str, bytes]], *,
             now: float, subject: str) -> TrustDecision:
    """Whether ``new`` may replace ``current``: a higher version, signed by ``current.threshold`` of
    ``current``'s keys AND by ``new.threshold`` of its own (TUF's rule: the old keys vouch for the new
    ones, the new ones prove they are held). The two verdicts' refusals are merged."""
    by_old = evaluate(new_bytes, signatures, current, now=now, subject=f"{subject} (by the current policy's keys)",
                      versioned=False)
    by_new = evaluate(new_bytes, signatures, new, now=now, subject=f"{subject} (by its own keys)", versioned=False)
    refusals = list(by_old.refusals) + list(by_new.refusals)
    if new.version <= current.version:
        refusals.append(Refusal(ROLLBACK, f"ROLLBACK: {subject}: version {new.version} is not above the current "
                                          f"policy's {current.version}"))
    return TrustDecision(subject=subject, signers=by_old.signers, threshold=current.threshold, checks=by_old.checks,
                   refusals=tuple(refusals), warnings=tuple(dict.fromkeys(by_old.warnings + by_new.warnings)),
                   version=new.version)
