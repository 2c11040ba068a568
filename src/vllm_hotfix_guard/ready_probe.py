"""``python -m vllm_hotfix_guard ready``: the probe that reads the records ready.py writes (docs/readiness.md).

Everything in the directory is input (ready.py says how it is checked); whatever goes wrong, the probe says
"not ready", never "ready". Its own module, apart from the writer that every vLLM process imports: the probe
runs every few seconds (its budget: 2x ``python -c pass``), the writer at every process start.
"""

from __future__ import annotations

import os

from vllm_hotfix_guard.ready import (FORMAT, KINDS, MAX_RECORDS, RECORD_LIMIT, SUFFIX, EXIT_NOT_READY, EXIT_READY,
                                     EXIT_USAGE, ID_CHARS, Record, Unusable, open_directory)
from vllm_hotfix_guard.ready_io import quote, read_small
from vllm_hotfix_guard.settings import EXPECT_FINGERPRINT_ENV, LOCK_CACHE_DIR, READY_DIR_ENV, TRUST_CACHE_DIR


def parse(name: str, data: bytes) -> Record:
    """One record, every field checked; ValueError naming what is wrong."""
    try:
        lines = data.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise ValueError("not ASCII") from None
    if not lines or lines[0] != FORMAT or lines[-1] != "":
        raise ValueError(f"not a record ({FORMAT!r} first, one field a line)")
    fields = {}
    for line in lines[1:-1]:
        key, _, value = line.partition(" ")
        if key in fields or not value:
            raise ValueError(f"field {key!r} repeated or empty")
        fields[key] = value
    wanted = ("pid", "start", "ppid", "kind", "role", "rank", "dp", "tp", "pp", "lock", "effect", "failing")
    if tuple(fields) != wanted:
        raise ValueError(f"fields {', '.join(fields)}, not {', '.join(wanted)}")
    pid, start, ppid = (_field_int(fields, k) for k in ("pid", "start", "ppid"))
    if pid is None or start is None or ppid is None or name != f"{pid}{SUFFIX}":
        raise ValueError("pid, start or ppid is not a number, or the pid is not the file's name")
    ranks = tuple(None if fields[k] == "-" else _field_int(fields, k, -1) for k in ("rank", "dp", "tp", "pp"))
    if fields["kind"] not in KINDS or -1 in ranks:
        raise ValueError("kind, rank, dp, tp or pp is not valid")
    lock = "" if fields["lock"] == "-" else fields["lock"]
    if lock and (len(lock) != 64 or not set(lock) <= set("0123456789abcdef")):
        raise ValueError("lock is not a sha256")
    if fields["effect"] not in ("yes", "no"):
        raise ValueError("effect is neither yes nor no")
    failing = () if fields["failing"] == "-" else tuple(fields["failing"].split(","))
    if any(not f or len(f) > 128 or not ID_CHARS.issuperset(f) for f in failing) or \
            (fields["effect"] == "yes") == bool(failing):
        raise ValueError("failing ids are not valid, or do not agree with effect")
    return Record(pid, start, ppid, fields["kind"], fields["role"][:200], ranks, lock, fields["effect"] == "yes",
                  failing)


def _field_int(fields: dict, key: str, bad=None):
    value = fields[key]
    return int(value) if value.isascii() and value.isdigit() and len(value) < 20 else bad


def read_records(base: str) -> tuple[list[Record], list[str]]:
    """Every record in the directory, and a line for each file that is not one (Unusable: the directory)."""
    fd = open_directory(base, create=False)
    try:
        names = os.listdir(fd)
        if len(names) > MAX_RECORDS:
            raise Unusable(f"{len(names)} files in {quote(base)}, more than {MAX_RECORDS}")
        records, problems, uid = [], [], os.geteuid()
        for name in sorted(names):
            if name.startswith(".") and name.endswith(".tmp"):
                continue  # a record being written
            if name in (TRUST_CACHE_DIR, LOCK_CACHE_DIR):
                continue  # the guard's caches (trust.py, lock_cache.py): no records
            try:
                if not name.endswith(SUFFIX):
                    raise ValueError("not a record's name (PID.ready)")
                data = read_small(name, RECORD_LIMIT, dir_fd=fd, uid=uid)
                if data is None:
                    continue  # gone since the listing
                records.append(parse(name, data))
            except (OSError, ValueError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                problems.append(f"record {quote(name)}: {why}")
        return records, problems
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    """``ready [--expect SPEC] [--pid N] [--json]``: exit 0 ready, 1 not ready (each missing or failing
    process one line on stdout), 2 usage (unknown option, bad SPEC, HOTFIX_READY_DIR unset, no vLLM
    command line to read the expected set from)."""
    from vllm_hotfix_guard import expected as expect

    try:
        options = expect.parse_options(argv[1:] if argv[:1] == ["ready"] else argv)
        base = os.environ.get(READY_DIR_ENV, "").strip()
        if not base:
            raise expect.Usage(f"{READY_DIR_ENV} is not set: no process records its verdict")
        wanted = expect.from_spec(options.spec) if options.spec is not None else expect.from_process(options.pid)
    except expect.Usage as exc:
        _print_err(f"ready: {exc}")
        return EXIT_USAGE
    try:
        records, problems = read_records(base)
        lines, counted = expect.judge(records, wanted, problems)
    except Unusable as exc:
        lines, counted = [f"directory: {exc}"], {}
    if os.environ.get(EXPECT_FINGERPRINT_ENV, "").strip():  # the pod's own proof (vllm_hotfix_guard/admitted.py)
        from vllm_hotfix_guard.admitted import fingerprint_problems

        lines += fingerprint_problems()
    if options.as_json:
        import json

        print(json.dumps({"ready": not lines, "expected": wanted.as_dict(), "in_effect": counted, "problems": lines}))
    else:
        for line in lines:
            print(line)
        if not lines:
            print(f"ready: {wanted.describe()}, all in effect")
    return EXIT_NOT_READY if lines else EXIT_READY


def _print_err(text: str) -> None:
    import sys

    sys.stderr.write(text + "\n")
