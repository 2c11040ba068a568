"""A catalog release's archive: the manifests and patches as one deterministic tar.gz, and its safe reading.

Written byte-reproducibly: members sorted by path as UTF-8 bytes, regular files only (no directory
entries), mode 0644, uid/gid 0, no user or group names, mtime 0, POSIX (pax) format, gzip with mtime 0,
no file name, level 9. The same files give the same bytes with the same zlib (the one Python links).

Read as hostile input, in memory: the archive is capped (its size is the signed metadata's), every
member's declared size is checked against the caps before a byte of it is read, and only regular files
under manifests/ or patches/ with a safe relative name are accepted: a link, a device, a FIFO, an
absolute name, a '..' or a name listed twice is InvalidInput (exit 8), never extracted. Nothing is
written here: the caller gets (path -> bytes) and writes it through txn/staged.py.
"""

from __future__ import annotations

import gzip
import io
import tarfile

from vllm_hotfix_guard.core.docfields import relpath_problem
from vllm_hotfix_guard.errors import InvalidInput

LISTED_DIRS = ("manifests", "patches")
FILE_LIMIT = 64 << 20  # a catalog patch's cap (catalog/manifest.py)
TOTAL_LIMIT = 512 << 20  # every member together, inflated
MAX_MEMBERS = 100_000


def build_archive(files: dict[str, bytes]) -> bytes:
    """The archive's bytes for ``files`` (relative posix path -> bytes), deterministically."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(files, key=lambda p: p.encode("utf-8", "surrogateescape")):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(files[path]), 0o644, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.type = tarfile.REGTYPE
            tar.addfile(info, io.BytesIO(files[path]))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def member_problem(name: str) -> str | None:
    """Why ``name`` cannot be a member of a catalog archive (None: it can)."""
    problem = relpath_problem(name)
    if problem:
        return problem
    if any(c < " " or c == "\x7f" for c in name):
        return "a control character"
    if name.split("/", 1)[0] not in LISTED_DIRS or "/" not in name:
        return "not under manifests/ or patches/"
    return None


def read_archive(data: bytes, source: str) -> dict[str, bytes]:
    """path -> bytes of every member of the archive ``data``; InvalidInput naming the member for anything
    not a safe regular file, or over the caps."""
    files: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for count, member in enumerate(tar, 1):
                if count > MAX_MEMBERS:
                    raise InvalidInput(f"{source}: more than {MAX_MEMBERS} members")
                name = member.name
                if member.isdir() and not relpath_problem(name.rstrip("/")):
                    continue
                if not member.isreg():
                    kind = "a link" if member.issym() or member.islnk() else "not a regular file"
                    raise InvalidInput(f"{source}: member {name!r} is {kind}; a catalog release holds regular files only")
                problem = member_problem(name)
                if problem:
                    raise InvalidInput(f"{source}: member {name!r}: unsafe name ({problem})")
                if name in files:
                    raise InvalidInput(f"{source}: member {name!r} is in the archive twice")
                total += member.size
                if member.size > FILE_LIMIT or total > TOTAL_LIMIT:
                    raise InvalidInput(f"{source}: member {name!r} is too large ({member.size} bytes; caps: "
                                       f"{FILE_LIMIT} a file, {TOTAL_LIMIT} in all)")
                handle = tar.extractfile(member)
                body = handle.read(member.size + 1) if handle is not None else b""
                if len(body) != member.size:
                    raise InvalidInput(f"{source}: member {name!r} is truncated")
                files[name] = body
    except (tarfile.TarError, EOFError, OSError, zlib_error()) as exc:
        raise InvalidInput(f"{source}: not a readable tar.gz archive ({type(exc).__name__}: {exc})") from None
    return files


def zlib_error() -> type:
    import zlib

    return zlib.error
