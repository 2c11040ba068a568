"""Printing: human lines on stdout, JSON on stdout with --json, notes and progress on stderr.

Every line printed in text mode passes ``visible`` (the one sanitiser): a string that came from outside
(a path, a patch or file line, a log line, a title, an id, an environment value) cannot drive the
terminal. File names are C-quoted as git quotes them (``quote_path``). Stdlib only and cheap to import
(no ``json``, ``re`` or ``time`` until used): the guard prints its one line through ``visible`` in every
vLLM process.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable, Iterator, TypeVar

T = TypeVar("T")


def emit_json(obj: Any) -> None:
    """--json: readable UTF-8, where JSON itself escapes the C0 controls; every other character ``visible``
    would escape (C1 controls such as U+009B, bidi and zero-width characters, a lone surrogate from a file
    name that is not UTF-8) is written as its ``\\uXXXX`` escape too: the same value for a JSON reader,
    nothing a terminal obeys when the document is printed to one."""
    import json

    text = json.dumps(obj, indent=2, default=str, ensure_ascii=False)
    if not text.isascii():
        import re

        text = re.sub(r"[^\x00-\x7f]", lambda m: m.group() if m.group().isprintable() else json.dumps(m.group())[1:-1],
                      text)
    _write(sys.stdout, text + "\n", flush=True)


# -- the one sanitiser ----------------------------------------------------------------------------
# What a terminal obeys: C0 controls (ESC starts CSI/OSC/DCS sequences: colours, the title, hyperlinks,
# clipboard writes; CR and BS overwrite what was printed; BEL rings), DEL, C1 controls (U+0080-U+009F:
# U+009B is CSI and U+009D OSC on their own), and the format characters that reorder or hide text
# (bidi overrides and isolates U+202A-E / U+2066-9, zero-width characters): all of them are Unicode's
# non-printable characters (str.isprintable is False), as are the lone surrogates a non-UTF-8 name decodes
# to. Tab stays as it is (it moves the cursor forward only); a newline only where a block of lines is
# printed (``lines=True``).

def _escape(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the undecodable byte itself
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return {0x0A: "\\n", 0x0D: "\\r", 0x1B: "\\e"}.get(code) or f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: str, *, lines: bool = False) -> str:
    """``text`` with every character that could drive a terminal shown as an escape (``\\e[31m``,
    ``\\x9b``, ``\\u202e``, ``\\r``; ``\\n`` too unless ``lines``): the one sanitiser of text output.
    Printable text, whatever its script, is left as it is (``tiling入口``)."""
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char.isprintable() or char == "\t" or (lines and char == "\n"):
            out.append(char)
        else:
            out.append(_escape(char))
    return "".join(out)


def quoted(text: str) -> str:
    """An outside string shown as content (a patch or file line, a log line) inside a message: in double
    quotes, ``"`` and ``\\`` escaped and the rest ``visible``, so its bounds are plain to see and it
    cannot end the message early."""
    return '"' + visible(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


def say(line: str = "") -> None:
    """One line on stdout (a newline inside it is shown as ``\\n``: no outside string can add a line)."""
    _write(sys.stdout, visible(line) + "\n")


def say_lines(lines: Iterable[str]) -> None:
    """Several lines on stdout, each as ``say`` prints it (a diff of a compose file, a summary block)."""
    for line in lines:
        say(line)


def terminal_width() -> int | None:
    """The width to fit lines to when stdout is a terminal: ``COLUMNS`` when set (as pip, git and less
    honour it), else the terminal's (``shutil.get_terminal_size``); None when stdout is a pipe or a file:
    plain whole lines, one per item, for grep and cut."""
    try:
        if not sys.stdout.isatty():
            return None
    except (ValueError, AttributeError):  # closed or replaced stdout
        return None
    import shutil

    return shutil.get_terminal_size().columns or None


def wrap(text: str, width: int | None, indent: str = "", first: str | None = None) -> list[str]:
    """``text`` as lines of at most ``width`` characters (unlimited: one line), continuation lines
    starting with ``indent`` and the first with ``first`` (default ``indent``); words never split
    unless one alone is wider than the line."""
    first = indent if first is None else first
    if width is None or len(first) + len(text) <= width:
        return [first + text]
    import textwrap

    return textwrap.wrap(text, width=max(width, len(indent) + 10), initial_indent=first, subsequent_indent=indent,
                         break_on_hyphens=False) or [first]


def note(line: str) -> None:
    """A side remark (warning, progress text) that must not pollute --json stdout."""
    _write(sys.stderr, f"hotfix: {visible(line)}\n")


def error_lines(message: str, hint: str | None) -> None:
    """The one-line error and its hint, on stderr (cli.main's report)."""
    _write(sys.stderr, f"hotfix: error: {visible(message)}\n" + (f"hotfix: hint: {visible(hint)}\n" if hint else ""),
           flush=True)


_LOST: set[int] = set()  # the fds (1, 2) whose reader went away: later output to them is dropped


def _write(stream, text: str, *, flush: bool = False) -> None:
    """Output is a report of what happened, never part of it: a closed stdout (``>&-``), a full disk
    (``>/dev/full``) or a reader that left (``| head -0``) loses the message, and the command still
    ends with the exit code of what it did (``finish_output`` at exit)."""
    if stream is None or id(stream) in _LOST:
        return
    try:
        stream.write(text)
        if flush:
            stream.flush()
    except (OSError, ValueError):  # EPIPE, ENOSPC, EIO, EBADF; ValueError: the stream was closed
        _lose(stream)


def _lose(stream) -> None:
    """Send what is still buffered for ``stream``, and anything later, to /dev/null, so neither this
    process nor the interpreter's exit flush fails on it again."""
    _LOST.add(id(stream))
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


def finish_output() -> None:
    """Flush stdout and stderr at exit; a failure there loses the output, not the exit code."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and id(stream) not in _LOST:
            try:
                stream.flush()
            except (OSError, ValueError):
                _lose(stream)


def progress(items: Iterable[T], total: int, label: str, *, enabled: bool | None = None) -> Iterator[T]:
    """Yield ``items``, drawing a one-line progress bar on stderr when it is a terminal."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled or total <= 0:
        yield from items
        return
    import time

    label = visible(label)
    last = 0.0
    done = 0
    for item in items:
        yield item
        done += 1
        now = time.monotonic()
        if now - last > 0.1 or done == total:
            last = now
            width = 30
            filled = int(width * done / total)
            _write(sys.stderr, f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}", flush=True)
    _write(sys.stderr, "\n")


# git's quote_c_style with core.quotePath on: control characters, '"', '\' and every byte >= 0x80.
_C_QUOTED = {7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r", 34: '\\"', 92: "\\\\"}
_PLAIN = frozenset(range(0x20, 0x7F)) - {34, 92}


def quote_path(name: str) -> str:
    """A file name taken from a patch, a record or a lock, as git prints it (``core.quotePath``): as is
    when every byte is printable ASCII, else C-quoted in double quotes (``"b/x\\nFAKE"``,
    ``"caf\\303\\251.py"``), so no name can forge an output line or hide behind terminal escapes.
    Every human-readable line that names such a file goes through here; --json needs no quoting."""
    if name.isascii() and name.isprintable() and '"' not in name and "\\" not in name:
        return name
    raw = name.encode("utf-8", "surrogateescape")
    out = ['"']
    for byte in raw:
        if byte in _PLAIN:
            out.append(chr(byte))
        else:
            out.append(_C_QUOTED.get(byte) or f"\\{byte:03o}")
    out.append('"')
    return "".join(out)
