"""`hotfix catalog add | update | list | remove`: subscribed catalogs (catalog/feeds.py, catalog/feed_update.py).

`add NAME URL --trust POLICY` fetches and checks the first release before anything is recorded (a
subscription that cannot be updated is never made); `update [NAME]...` fetches each subscription's
newest release and swaps it in only when the policy accepts it (exit 11-15 otherwise, 10 when it cannot
be fetched, 8 when it is malformed; the cached copy byte-identical); `list` shows each subscription, its
cached version, expiry and whether it is stale; `remove NAME` forgets one.
"""

from __future__ import annotations

import os
import shutil
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator, Optional, Sequence

from vllm_hotfix_guard.errors import HotfixError, Refused, UsageError
from vllm_hotfix_guard.output import emit_json, error_lines, quote_path, say

LOCK_TIMEOUT = 60.0


def add(*, name: str, url: str, trust: Path, ca: Optional[Path], dry_run: bool, as_json: bool) -> int:
    from vllm_hotfix.catalog import feeds
    from vllm_hotfix.catalog.fetch import check_url
    from vllm_hotfix.catalog.feed_update import update
    from vllm_hotfix_guard.txn.atomic import atomic_write

    feeds.check_name(name)
    if feeds.read_subscription(name) is not None:
        raise Refused(f"catalog {name} is already subscribed; nothing was changed",
                      hint=f"`hotfix catalog update {name}` fetches its newest release; `hotfix catalog remove {name}` "
                           f"first to subscribe it elsewhere")
    for given, what in ((trust, "trust policy"), (ca, "CA bundle")):
        if given is not None and not Path(given).is_file():
            raise UsageError(f"{quote_path(str(given))}: no such {what}")
    subscription = feeds.Subscription(name=name, url=check_url(url), trust=os.path.abspath(trust),
                                      ca=os.path.abspath(ca) if ca else None)
    with feed_lock(name) if not dry_run else nullcontext():
        outcome, tree = update(subscription, now=time.time())
        if not dry_run:
            write_cache(name, tree)
            try:
                atomic_write(feeds.feed_dir(name) / feeds.SUBSCRIPTION, feeds.dump_subscription(subscription), 0o644)
            except OSError as exc:
                from vllm_hotfix_guard.errors import WriteFailed

                raise WriteFailed(f"{feeds.feed_dir(name) / feeds.SUBSCRIPTION}: cannot write the subscription: "
                                  f"{exc.strerror}", hint=f"`hotfix catalog remove {name}` takes the cached copy "
                                                          f"away") from None
    if as_json:
        emit_json({"subscription": subscription.to_json(), "release": outcome.to_json(), "dry_run": dry_run})
        return 0
    verb = "would subscribe" if dry_run else "subscribed"
    say(f"{verb} catalog {name}: release {outcome.version} (expires {outcome.expires}), signed by "
        f"{', '.join(outcome.signers)}")
    for warning in outcome.warnings:
        say(f"warning: {warning}")
    return 0


def update(*, names: Sequence[str], dry_run: bool, as_json: bool) -> int:
    """Every named (default: every) subscription; the exit code is the first failure's."""
    from vllm_hotfix.catalog import feeds
    from vllm_hotfix.catalog.feed_update import update as update_one

    chosen = list(names) or feeds.names()
    if not chosen:
        raise UsageError("no catalog is subscribed", hint="`hotfix catalog add NAME URL --trust POLICY`")
    results, code = [], 0
    for name in chosen:
        subscription = feeds.read_subscription(name)
        if subscription is None:
            raise UsageError(f"no subscribed catalog {name!r}", hint="`hotfix catalog list` shows them")
        try:
            with feed_lock(name) if not dry_run else nullcontext():  # read, judged against, replaced: one at a time
                outcome, tree = update_one(subscription, now=time.time())
                if tree is not None and not dry_run:
                    write_cache(name, tree)
        except HotfixError as exc:
            code = code or int(exc.exit_code)
            results.append({"name": name, "error": {"kind": type(exc).__name__, "message": exc.message,
                                                    "hint": exc.hint, "exit_code": int(exc.exit_code)}})
            if not as_json:
                error_lines(f"catalog {name}: {exc.message}", exc.hint)
            continue
        results.append(outcome.to_json())
        if not as_json:
            _say_outcome(outcome, dry_run)
    if as_json:
        emit_json(results)
    return code


@contextmanager
def feed_lock(name: str, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """An exclusive flock on feeds/.NAME.lock for the block (Busy, exit 7, after ``timeout`` s): two updates at
    once could otherwise each judge against the same cached release and the older one land last."""
    import errno
    import fcntl

    from vllm_hotfix.catalog import feeds
    from vllm_hotfix_guard import paths
    from vllm_hotfix_guard.errors import Busy, WriteFailed

    root = paths.feeds_dir()
    try:
        paths.make_state_dir(root)
        paths.check_trusted(root)
        fd = os.open(root / f".{feeds.check_name(name)}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
                     | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        raise WriteFailed(f"{exc.filename or root}: cannot lock the subscription: {exc.strerror}; nothing was changed",
                          hint="set HOTFIX_STATE_DIR to a writable directory") from None
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or time.monotonic() > deadline:
                    raise Busy(f"another hotfix process is updating the catalog {name}",
                               hint="wait for it, then run the command again") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def write_cache(name: str, tree: Optional[dict]) -> None:
    """Swap ``tree`` in as the cached release of ``name``, whole (nothing when None: already current)."""
    from vllm_hotfix.catalog import feeds
    from vllm_hotfix.txn.staged import write_directory
    from vllm_hotfix_guard import paths

    directory = feeds.feed_dir(name)
    try:
        paths.make_state_dir(directory)
    except OSError as exc:
        from vllm_hotfix_guard.errors import WriteFailed

        raise WriteFailed(f"{exc.filename or directory}: cannot create the subscription's folder: {exc.strerror}; "
                          f"nothing was changed", hint="set HOTFIX_STATE_DIR to a writable directory") from None
    paths.check_trusted(paths.feeds_dir(), directory)
    if tree is not None:
        write_directory(feeds.release_dir(name), tree, suffix=".hotfix-feed", what=f"the cached catalog {name}")


def _say_outcome(outcome, dry_run: bool) -> None:
    if outcome.status == "current":
        say(f"catalog {outcome.name}: release {outcome.version} is current (expires {outcome.expires})")
    else:
        verb = "would update" if dry_run else "updated"
        was = f"from release {outcome.previous} " if outcome.previous is not None else ""
        say(f"catalog {outcome.name}: {verb} {was}to release {outcome.version} (expires {outcome.expires}), signed "
            f"by {', '.join(outcome.signers)}")
    for warning in outcome.warnings:
        say(f"catalog {outcome.name}: warning: {warning}")


def listing(*, as_json: bool) -> int:
    from vllm_hotfix.catalog import feeds

    now = time.time()
    found = feeds.subscribed()
    if as_json:
        emit_json([cached.to_json(now) for cached in found])
        return 0
    if not found:
        say("no catalog is subscribed (`hotfix catalog add NAME URL --trust POLICY`)")
    for cached in found:
        release = cached.release
        state = ("never updated" if release is None else
                 f"STALE: release {release.version} expired at {release.expires}" if cached.stale(now) else
                 f"release {release.version}, expires {release.expires}")
        say(f"{cached.subscription.name}  {cached.subscription.url}  {state}")
    return 0


def remove(*, name: str, dry_run: bool, as_json: bool) -> int:
    from vllm_hotfix.catalog import feeds

    if feeds.read_subscription(name) is None:
        raise UsageError(f"no subscribed catalog {name!r}", hint="`hotfix catalog list` shows them")
    directory = feeds.feed_dir(name)
    if not dry_run:
        gone = directory.with_name(f".{name}.removed-{os.getpid()}")
        os.rename(directory, gone)  # one step: the catalog is no longer loaded from here on
        shutil.rmtree(gone, ignore_errors=True)
    if as_json:
        emit_json({"removed": name, "dry_run": dry_run})
    else:
        say(f"{'would remove' if dry_run else 'removed'} the subscribed catalog {name}")
    return 0
