"""A bundle's gzip layer read back as untrusted input, in bounded memory (issue 45): the compressed blob
(checked against its digest and size by the caller's ``blob``) is inflated 1 MiB at a time into a
streaming tar reader, hashed as it goes (the config's ``diff_id``), and each member is read only after
its header says it fits: a gzip bomb stops at ``content_cap`` with at most one chunk inflated, a member
over ``MEMBER_LIMIT`` is refused before a byte of it is read. The members are what bundle.check keeps;
nothing else of the tar is held."""

from __future__ import annotations

import hashlib
import io
import tarfile
import zlib
from typing import Iterator, Optional

from vllm_hotfix.containers.oci import MEDIA_LAYER, Descriptor
from vllm_hotfix_guard.core.docfields import relpath_problem
from vllm_hotfix_guard.errors import InvalidInput

CHUNK = 1 << 20
MEMBER_LIMIT = 64 << 20  # one file of a bundle (an exported file's cap, inputs.EXPORT_FILE_LIMIT)


class _Inflated(io.RawIOBase):
    """The uncompressed bytes of one gzip stream, at most ``cap`` of them, hashed as they are read."""

    def __init__(self, data: bytes, cap: int, refuse):
        self._input, self._at = memoryview(data), 0
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._pending, self._offset = b"", 0
        self.total, self.cap, self.hash, self._refuse = 0, cap, hashlib.sha256(), refuse

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._offset >= len(self._pending):
            if self._inflate.eof:
                return 0
            tail = self._inflate.unconsumed_tail
            if not tail and self._at >= len(self._input):
                return 0
            if not tail:
                tail, self._at = self._input[self._at:self._at + CHUNK], self._at + CHUNK
            try:
                out = self._inflate.decompress(tail, CHUNK)
            except zlib.error as exc:
                raise self._refuse(f"is not a readable gzip stream ({exc})") from None
            self.total += len(out)
            if self.total > self.cap:
                raise self._refuse(f"unpacks to more than {self.cap} bytes")
            self.hash.update(out)
            self._pending, self._offset = out, 0
        n = min(len(buffer), len(self._pending) - self._offset)
        buffer[:n] = self._pending[self._offset:self._offset + n]
        self._offset += n
        return n

    def whole(self) -> bool:
        """Read to the end: one whole gzip stream, nothing after it."""
        while self.read(CHUNK):
            pass
        return self._inflate.eof and not self._inflate.unused_data and self._at >= len(self._input)


def layer_members(source: str, blob, layer: Descriptor, diff_id: str, *, cap: int,
                  content_cap: int) -> Iterator[tuple[str, Optional[bytes], int]]:
    """(path, bytes or None for a directory, mode) of each member of a gzip layer, after checking the
    blob (digest, size, at most ``cap``); the uncompressed tar is checked against ``diff_id`` (at most
    ``content_cap`` bytes: a gzip bomb stops there) once the last member is read, before this returns.
    Only regular files (each at most MEMBER_LIMIT) and directories at confined paths are read; anything
    else (a link, a device, a whiteout, '..') is InvalidInput."""
    if layer.media_type != MEDIA_LAYER:
        raise InvalidInput(f"{source}: layer {layer.digest} is {layer.media_type!r}, not {MEDIA_LAYER}")

    def refuse(why: str) -> InvalidInput:
        return InvalidInput(f"{source}: layer {layer.digest} {why}")

    tar = _Inflated(blob(layer, cap), content_cap, refuse)
    try:
        with tarfile.open(fileobj=io.BufferedReader(tar, CHUNK), mode="r|", encoding="utf-8",
                          errors="strict") as archive:
            for info in archive:
                yield _member(source, archive, info, min(MEMBER_LIMIT, content_cap), refuse)
    except (tarfile.TarError, UnicodeError) as exc:
        raise refuse(f"is not a readable tar: {exc}") from None
    if not tar.whole():
        raise refuse("is not one whole gzip stream")
    if "sha256:" + tar.hash.hexdigest() != diff_id:
        raise refuse(f"unpacks to sha256:{tar.hash.hexdigest()}, not the config's {diff_id}")


def _member(source: str, archive, info, member_cap: int, refuse) -> tuple[str, Optional[bytes], int]:
    path = info.name.rstrip("/") if info.isdir() else info.name
    problem = relpath_problem(path) or ("a whiteout" if path.rsplit("/", 1)[-1].startswith(".wh.") else None)
    if problem or not (info.isreg() or info.isdir()):
        kind = "a directory" if info.isdir() else "a regular file" if info.isreg() else "a link or device"
        raise InvalidInput(f"{source}: layer member {info.name!r} is refused ({problem or kind})")
    if info.isreg() and info.size > member_cap:
        raise refuse(f"member {info.name!r} is {info.size} bytes: unpacks to more than {member_cap} bytes")
    return path, archive.extractfile(info).read() if info.isreg() else None, info.mode
