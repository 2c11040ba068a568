"""How `hotfix doctor` reads its logs: files, ``-`` for stdin, FIFOs and ``.gz`` (by content) in 8 MiB
blocks cut anywhere, in bounded memory whatever they hold.

- a regular file is read to its end (the file is never held: one reused buffer); a device named as a
  log is refused at once (exit 2); a pipe, stdin, a FIFO and a .gz's decompressed content are streams,
  capped at ``STREAM_LIMIT`` (exit 8 past it: ``cat /dev/zero |`` and a gzip bomb stop);
- no line is ever held whole: the engine keeps a line's first ``doctor.prefilter.LINE_HEAD`` bytes and
  counts the rest (``Prefiltered.cut``); with ``HOTFIX_DOCTOR_PREFILTER=grep`` a line running over
  blocks reaches ``grep -F`` cut to that head too (grep holds whole lines), and its output is read a
  bounded line at a time.
"""

from __future__ import annotations

import gzip
import os
import sys
import zlib
from typing import BinaryIO, Iterator, Sequence

from vllm_hotfix_guard.errors import InvalidInput, UsageError

BLOCK = 8 << 20  # bytes read at a time: the file is never held
PREFILTERS = ("aho-corasick", "grep", "python")  # HOTFIX_DOCTOR_PREFILTER


def blocks(stream: BinaryIO, size: int = BLOCK, *, reuse: bool = False) -> Iterator[bytes]:
    """The stream's bytes in blocks of ``size``, cut anywhere (the engine joins a line that runs over
    a block's end): each byte is copied once, by the read itself. ``reuse`` reads every block into one
    buffer (no new memory per block): a block is then valid only until the next one is asked for,
    which is how the engine reads them (it copies out the few lines it keeps)."""
    if not reuse:
        while True:
            data = stream.read(size)
            if not data:
                return
            yield data
    buffer = bytearray(size)
    view = memoryview(buffer)
    while True:
        got = stream.readinto(view)
        if not got:
            return
        yield buffer if got == size else bytes(view[:got])  # type: ignore[misc]


# Bytes doctor reads from a stream whose size it cannot know first (a pipe, stdin, a FIFO, a .gz's content)
# before it stops (exit 8): far above any real log (the benchmark's is 1 GiB), far below `cat /dev/zero |`.
STREAM_LIMIT = 16 << 30


class _Capped:
    """A stream that refuses (InvalidInput, exit 8) to give more than ``STREAM_LIMIT`` bytes."""

    __slots__ = ("stream", "label", "left")

    def __init__(self, stream, label: str) -> None:
        self.stream, self.label, self.left = stream, label, STREAM_LIMIT

    def _took(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            from vllm_hotfix_guard.errors import InvalidInput
            from vllm_hotfix_guard.inputs import size_text

            raise InvalidInput(f"{self.label}: more than {size_text(STREAM_LIMIT)} read from a stream (a pipe, stdin, "
                               f"a FIFO or a .gz's content); doctor stops there",
                               hint="give the log file itself, or the part of it around the crash (tail -c 1G LOG)")

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self._took(len(data))
        return data

    def readinto(self, view) -> int:
        got = self.stream.readinto(view)
        self._took(got or 0)
        return got


def open_log(name: str) -> tuple[str, BinaryIO, BinaryIO]:
    """(label, the stream of log bytes, the file to close); gzip is recognised by its magic bytes. A
    regular file is read to its end; a device named as a log is refused (exit 2) without blocking; a
    pipe, stdin, a FIFO and a .gz's content are streams, capped at ``STREAM_LIMIT``."""
    import stat

    if name == "-":
        if sys.stdin is None:  # `<&-`: there is no standard input at all
            raise UsageError("-: standard input is closed, there is no log to read",
                             hint="pipe the log in (docker logs vllm 2>&1 | hotfix doctor -) or name the log files")
        raw: BinaryIO = sys.stdin.buffer
        label = "<stdin>"
        try:
            regular = stat.S_ISREG(os.fstat(raw.fileno()).st_mode)
        except (OSError, ValueError, AttributeError):
            regular = False
    else:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)  # a FIFO never blocks here
        except OSError as exc:
            raise UsageError(f"{name}: cannot read: {exc.strerror or exc}") from None
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            os.close(fd)
            what = "a directory" if stat.S_ISDIR(mode) else "a device or socket"
            raise UsageError(f"{name}: is {what}, not a log file", hint="name the log files, or pipe the log in: -")
        regular = stat.S_ISREG(mode)
        if not regular:  # a FIFO or a process substitution: from here, wait for its writer
            os.set_blocking(fd, True)
        raw = os.fdopen(fd, "rb")  # noqa: SIM115 - closed by sources
        label = name
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    if head == b"\x1f\x8b":
        import gzip

        return label, _Capped(gzip.GzipFile(fileobj=raw), label), raw  # type: ignore[return-value]
    return label, (raw if regular else _Capped(raw, label)), raw  # type: ignore[return-value]


def sources(names: Sequence[str], needles: tuple[bytes, ...], prefilter: str) -> Iterator[tuple[str, Iterator]]:
    for name in names:
        label, stream, raw = open_log(name)
        try:
            grep = grep_binary() if prefilter == "grep" else ""
            yield label, checked(label, parts(stream, needles, grep=grep, reuse=True))  # the engine reads in order
        finally:
            if raw is not sys.stdin.buffer:
                raw.close()


def prefilter_kind() -> str:
    """Which prefilter finds the candidate lines: ``HOTFIX_DOCTOR_PREFILTER`` (aho-corasick, grep,
    python), by default Aho-Corasick in this process when ``ahocorasick-rs`` is installed, else
    ``grep -F`` when there is a grep, else ``bytes.find``."""
    wanted = os.environ.get("HOTFIX_DOCTOR_PREFILTER", "")
    if wanted and wanted not in PREFILTERS:
        raise UsageError(f"HOTFIX_DOCTOR_PREFILTER={wanted}: expected one of {', '.join(PREFILTERS)}")
    from vllm_hotfix.doctor.engine import Prefilter

    fast = Prefilter((b"x",)).kind == "aho-corasick"
    if wanted == "aho-corasick" and not fast:
        raise UsageError("HOTFIX_DOCTOR_PREFILTER=aho-corasick: the ahocorasick-rs package is not installed",
                         hint="pip install ahocorasick-rs, or leave HOTFIX_DOCTOR_PREFILTER unset")
    if wanted:
        return wanted
    return "aho-corasick" if fast else "grep" if grep_binary() else "python"


def grep_binary() -> str | None:
    import shutil  # only the grep prefilter needs shutil, subprocess and threading (they cost start-up)

    return shutil.which("grep")


def parts(stream: BinaryIO, needles: tuple[bytes, ...], grep: str | None = None, *, reuse: bool = False) -> Iterator:
    """The log as the engine takes it: blocks as read (the engine prefilters them), or, given a
    ``grep`` binary, prefiltered batches: ``grep -F`` finds the lines holding a needle while this
    process only copies the bytes into its pipe and counts the lines. Same result either way.
    ``reuse``: the blocks share one buffer (``blocks``), for a consumer that reads them in order."""
    if not grep:
        yield from blocks(stream, reuse=reuse)
        return
    import subprocess
    import threading

    from vllm_hotfix.doctor.engine import Prefiltered
    from vllm_hotfix.doctor.prefilter import LINE_HEAD

    argv = [grep, "-F", "-n", "-a"] + [arg for needle in needles for arg in (b"-e", needle)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, "LC_ALL": "C"})
    counted: list[int] = []
    failure: list[BaseException] = []

    skipped: dict[int, int] = {}  # 0-based line -> bytes of it not handed to grep (a line over blocks)

    writer = threading.Thread(target=_feed_grep, args=(stream, proc.stdin, skipped, counted, failure), daemon=True)
    writer.start()
    base, batch, cut = 0, [], []
    try:
        for out, beyond in _bounded_lines(proc.stdout, LINE_HEAD + 24):  # "N:" + a line's head: none held whole
            number, _, text = out.partition(b":")
            text = text.rstrip(b"\n")
            index = int(number) - 1 - base
            beyond += skipped.pop(int(number) - 1, 0) if skipped else 0
            if beyond or len(text) > LINE_HEAD:
                cut.append((index, beyond + max(0, len(text) - LINE_HEAD)))
                text = text[:LINE_HEAD]
            batch.append((index, text))
            if len(batch) >= 10_000:
                last = int(number)
                yield Prefiltered(tuple(batch), last - base, tuple(cut))
                base, batch, cut = last, [], []
        writer.join()
        if failure:
            raise failure[0]
        if proc.wait() > 1:
            raise UsageError(f"{grep} failed (exit {proc.returncode}) while prefiltering the log",
                             hint="HOTFIX_DOCTOR_PREFILTER=python makes doctor search in Python")
        yield Prefiltered(tuple(batch), counted[0] - base, tuple(cut))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        writer.join()


def _feed_grep(stream: BinaryIO, stdin, skipped: dict[int, int], counted: list[int], failure: list) -> None:
    """A thread of ``parts``: writes the log's blocks into grep's ``stdin`` while ``parts`` reads grep's output;
    a line running over blocks is cut at LINE_HEAD (its bytes not written: ``skipped``), the lines counted."""
    from vllm_hotfix.doctor.prefilter import LINE_HEAD

    lines, last, run = 0, b"\n", 0  # run: bytes of the unfinished last line written so far
    write = stdin.write
    try:
        for chunk in blocks(stream):
            first, end = chunk.find(b"\n"), chunk.rfind(b"\n") + 1
            head = len(chunk) if first == -1 else first
            room = max(0, LINE_HEAD - run)
            tail = len(chunk) - end if first != -1 else 0
            if head <= room and tail <= LINE_HEAD:  # the common block: no line over LINE_HEAD runs out of it
                write(chunk)
            else:  # a line running over blocks reaches grep cut at LINE_HEAD (grep holds whole lines)
                view = memoryview(chunk)
                write(view[:min(head, room)])
                if head > room:
                    skipped[lines] = skipped.get(lines, 0) + head - room
                if first != -1:
                    write(view[first:end])
                    write(view[end:end + LINE_HEAD])
                    if tail > LINE_HEAD:
                        skipped[lines + chunk.count(b"\n")] = tail - LINE_HEAD
            run = run + head if first == -1 else tail
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    except BrokenPipeError:
        pass
    except BaseException as exc:  # noqa: BLE001 - re-raised in the reading thread
        failure.append(exc)
    finally:
        counted.append(lines + (last != b"\n"))  # a last line without a newline counts
        try:
            stdin.close()
        except BrokenPipeError:
            pass


def _bounded_lines(stream: BinaryIO, limit: int) -> Iterator[tuple[bytes, int]]:
    """The lines of ``stream``, each cut at ``limit`` bytes: (its head, bytes of it skipped after)."""
    while True:
        line = stream.readline(limit)
        if not line:
            return
        beyond = 0
        if not line.endswith(b"\n"):  # skip the rest of this line, counting it
            more = stream.readline(1 << 20)
            while more:
                beyond += len(more) - more.endswith(b"\n")
                if more.endswith(b"\n"):
                    break
                more = stream.readline(1 << 20)
        yield line, beyond


def checked(label: str, parts: Iterator) -> Iterator:
    try:
        yield from parts
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:  # a truncated or corrupt .gz: invalid input
        raise InvalidInput(f"{label}: not a whole gzip stream: {exc}",
                           hint="a truncated or corrupt .gz; decompress what is there with `zcat -f`") from None
    except OSError as exc:
        raise UsageError(f"{label}: cannot read: {exc.strerror or exc}") from None
