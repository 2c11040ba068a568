"""Printing: human lines on stdout, JSON on stdout with --json, notes and progress on stderr."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Iterable, Iterator, TypeVar

T = TypeVar("T")


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def say(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def terminal_width() -> int | None:
    """The width to fit lines to: ``COLUMNS`` when set (as pip, git and less honour it), else the
    terminal's when stdout is one; None when stdout is a pipe or a file (whole lines, for grep)."""
    import os

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if sys.stdout.isatty():
            return os.get_terminal_size(sys.stdout.fileno()).columns or None
    except (OSError, ValueError, AttributeError):
        pass
    return None


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
    sys.stderr.write(f"hotfix: {line}\n")


def progress(items: Iterable[T], total: int, label: str, *, enabled: bool | None = None) -> Iterator[T]:
    """Yield ``items``, drawing a one-line progress bar on stderr when it is a terminal."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled or total <= 0:
        yield from items
        return
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
            sys.stderr.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
            sys.stderr.flush()
    sys.stderr.write("\n")
