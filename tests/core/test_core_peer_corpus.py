"""Peers' own sample diffs against `git apply`: the diffs python-unidiff and whatthepatch ship in their
source distributions (patch-ng ships none, but is fetched so that a future sample set is picked up).

The sdists are downloaded at test time with pip and cached (``$HOTFIX_TEST_CACHE`` or
~/.cache/vllm-hotfix/peers); nothing of them is stored in this repository. Each diff gets a pre-image
built from its hunks' old lines (placed at their header's line, gaps filled with unique lines), by a
reader written here independently of hotfix's parser, so a misread name or hunk shows up as a
difference from git.
"""

from __future__ import annotations

import codecs
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from git_oracle import Case, compare, fresh

pytestmark = [pytest.mark.real, pytest.mark.skipif(shutil.which("git") is None, reason="git is the oracle")]

PEERS = ("unidiff==1.0.1", "whatthepatch==1.0.7", "patch-ng==1.19.1")
SAMPLE = re.compile(r"/tests?/.*\.(diff|patch)$")
NETWORK_DOWN = ("NewConnectionError", "Name or service not known", "Temporary failure in name resolution",
                "Network is unreachable", "Max retries exceeded", "ConnectTimeout", "No route to host")
HUNK = re.compile(rb"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _cache() -> Path:
    root = os.environ.get("HOTFIX_TEST_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "vllm-hotfix") / "peers"


def _sdists() -> list[Path]:
    cache = _cache()
    cache.mkdir(parents=True, exist_ok=True)
    prefixes = [spec.replace("-", "_").replace("==", "-") + "." for spec in PEERS]  # patch_ng-1.19.1.tar.gz

    def cached() -> list[Path]:
        return sorted(p for p in cache.iterdir() if any(p.name.startswith(prefix) for prefix in prefixes))

    if len(cached()) < len(PEERS):
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                               "--no-cache-dir", *PEERS, "-d", str(cache)], capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            if any(word in done.stdout + done.stderr for word in NETWORK_DOWN):
                pytest.skip("no network to download the peers' sdists")
            raise AssertionError(f"pip download failed: {done.stderr[-2000:]}")
    return cached()


def _samples(sdist: Path) -> dict[str, bytes]:
    if sdist.name.endswith(".zip"):
        with zipfile.ZipFile(sdist) as archive:
            return {n: archive.read(n) for n in archive.namelist() if SAMPLE.search(n)}
    with tarfile.open(sdist) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers()
                if m.isfile() and SAMPLE.search(m.name)}


def _name(raw: bytes) -> bytes | None:
    raw = raw.split(b"\t")[0].rstrip(b"\r")
    if raw.startswith(b'"') and raw.endswith(b'"'):
        raw = codecs.escape_decode(raw[1:-1])[0]
    raw = re.sub(rb"\s+\d{4}-\d\d-\d\d[\d:. +-]*$", b"", raw)
    return None if raw == b"/dev/null" else raw


def _places(name: bytes) -> list[str]:
    """Where git may look for a name: at -p1, or at -p0 when it has no '/' (git's guess)."""
    text = name.decode("utf-8", "surrogateescape")
    if "/" not in text:
        return [text]
    rest = text.split("/", 1)[1]
    return [rest] if rest and not rest.startswith("/") and ".." not in rest.split("/") else []


def preimage(data: bytes) -> dict[str, bytes]:
    """Old files as the diff's hunks describe them; renamed / copied / mode-changed sources as one line."""
    lines = data.split(b"\n")
    texts: dict[str, dict[int, bytes]] = {}
    ends: dict[str, bool] = {}  # path -> the old side's last line has no newline
    targets: list[str] = []
    destinations: set[str] = set()  # 'rename to' / 'copy to': must not exist before
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith((b"rename to ", b"copy to ")):
            destinations.update(_places(b"b/" + _name(line.split(b" ", 2)[2])))
        if line.startswith((b"rename from ", b"copy from ")):
            for path in _places(b"a/" + _name(line.split(b" ", 2)[2])):
                texts.setdefault(path, {1: b"source of a rename or copy"})
        elif line.startswith(b"diff --git ") and b'"' not in line:
            names = line[11:].split(b" ")
            if len(names) == 2 and (i + 1 >= len(lines) or not lines[i + 1].startswith(b"new file")):
                for path in _places(names[0]):
                    texts.setdefault(path, {1: b"old content"})
        elif line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "):
            old, new = _name(line[4:]), _name(lines[i + 1][4:])
            targets = [] if old is None else sorted({p for n in (old, new) if n for p in _places(n)} - destinations)
            for path in targets:
                texts[path] = {}
            i += 2
            continue
        found = HUNK.match(line)
        if found and targets:
            number, left = int(found[1]), 1 if found[2] is None else int(found[2])
            new_left = 1 if found[4] is None else int(found[4])
            i += 1
            while (left > 0 or new_left > 0) and i < len(lines):
                body = lines[i]
                op, text = (body[:1] or b" "), body[1:]
                if op in b" -":
                    for path in targets:
                        texts[path][number] = text
                    number, left = number + 1, left - 1
                if op in b" +":
                    new_left -= 1
                if op not in b" -+\\":
                    break
                i += 1
            if i < len(lines) and lines[i].startswith(b"\\") and lines[i - 1][:1] in (b" ", b"-"):
                for path in targets:
                    ends[path] = True
            continue
        i += 1
    files = {}
    for path, numbered in texts.items():
        if not numbered:  # only '-0,0' hunks: nothing is known of an old file (an epoch-dated creation)
            continue
        last = max(numbered, default=0)
        body = [numbered.get(n, b"filler line %d of %s" % (n, path.encode("utf-8", "surrogateescape")))
                for n in range(1, last + 1)]
        files[path] = b"".join(t + b"\n" for t in body)
        if ends.get(path) and files[path]:
            files[path] = files[path][:-1]
    return files


def test_peer_sample_diffs_agree_with_git_apply(tmp_path):
    verdicts: Counter[str] = Counter()
    problems = []
    compared = 0
    for sdist in _sdists():
        for name, data in sorted(_samples(sdist).items()):
            try:
                files = preimage(data)
            except Exception:  # a sample this small reader cannot follow: nothing to build
                files = {}
            compared += 1
            try:
                verdict, _, _ = compare(fresh(tmp_path, str(compared)), Case(files, data), classify=True)
            except AssertionError as problem:
                problems.append(f"{sdist.name}:{name}: {problem}")
                continue
            verdicts[verdict] += 1
    print(f"\npeer sample diffs compared with git apply: {compared}; {dict(verdicts)}")
    assert compared >= 60, "the peers' sample sets shrank: check PEERS"
    assert not problems, "\n".join(problems)
