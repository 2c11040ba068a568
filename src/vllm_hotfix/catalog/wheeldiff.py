"""Which files differ between two published wheels of one distribution (a patch release and its .0).

Read from the zips, never installed. Equal or not is decided by each wheel's RECORD sha256 (the wheels
themselves were checked against the index's sha256 when downloaded); the zip's own listing and sizes
must agree with RECORD, and every file whose bytes are used is hashed again against its RECORD line.
Python sources are returned with both contents; ``_version.py`` is left out (the installed version must
stay honest); compiled files (``*.so`` and the like, or anything starting with the ELF magic, such as
vLLM's ``vllm-rs``) are only listed: a rebuilt binary differs even when its source did not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from vllm_hotfix.catalog.upstream import WheelReader
from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix.install.record import RecordEntry, data_digest, parse_record

COMPILED_SUFFIXES = (".so", ".pyd", ".dylib", ".dll", ".o", ".a")
ELF_MAGIC = b"\x7fELF"
VERSION_FILE = "_version.py"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangedFile:
    """A Python file that differs: its bytes in the old and the new wheel (None: absent there)."""

    path: str
    before: bytes | None
    after: bytes | None
    mode: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WheelDiff:
    """The files two wheels disagree on, sorted by kind."""

    python: tuple[ChangedFile, ...]
    compiled: tuple[str, ...]
    excluded: tuple[str, ...]   # _version.py
    other: tuple[str, ...]      # data files that are neither (listed, not included)
    package: str                # the top-level import name the files live under


class _Wheel(WheelReader):
    """A wheel with its RECORD, checked against the zip's own listing and sizes."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.path = self.wheel
        self.zip = self.archive
        records = [n for n in self.members if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise InvalidInput(f"{self.path.name}: expected one *.dist-info/RECORD, found {len(records)}")
        self.dist_info = records[0].split("/")[0]
        text = self.read_member(self.members[records[0]]).decode("utf-8", "replace")
        self.record = {p: e for p, e in parse_record(text, source=f"{self.path.name}:{records[0]}").items()
                       if not _is_metadata(p)}
        files = {n for n in self.members if not _is_metadata(n)}
        missing = sorted(files ^ set(self.record))
        if missing:
            raise InvalidInput(f"{self.path.name}: {missing[0]} is in the zip or in RECORD, not both")
        for name, entry in self.record.items():
            if entry.size is not None and entry.size != self.members[name].file_size:
                raise InvalidInput(f"{self.path.name}: {name}: size {self.members[name].file_size} differs from RECORD")

    def read(self, name: str) -> bytes:
        data = self.read_member(self.members[name])  # capped by declared and by actual size
        entry: RecordEntry = self.record[name]
        if entry.algorithm is not None and data_digest(data, entry.algorithm) != entry.digest:
            raise InvalidInput(f"{self.path.name}: {name} does not match its RECORD hash")
        return data

    def compiled(self, name: str) -> bool:
        if name.endswith(COMPILED_SUFFIXES):
            return True
        with self.zip.open(self.members[name]) as member:
            return member.read(len(ELF_MAGIC)) == ELF_MAGIC

    def mode(self, name: str) -> int:
        return (self.members[name].external_attr >> 16) & 0o777 or 0o644


def _is_metadata(name: str) -> bool:
    top = name.split("/", 1)[0]
    return top.endswith((".dist-info", ".data"))


def _same(a: RecordEntry | None, b: RecordEntry | None) -> bool:
    return (a is not None and b is not None and a.algorithm is not None and a.algorithm == b.algorithm
            and a.digest == b.digest)


def compare_wheels(old: Path, new: Path) -> WheelDiff:
    """The files of ``new`` that differ from ``old`` (both real wheels of one distribution)."""
    first, second = _Wheel(old), _Wheel(new)
    try:
        python, compiled, excluded, other = [], [], [], []
        for name in sorted(set(first.record) | set(second.record)):
            a, b = first.record.get(name), second.record.get(name)
            if _same(a, b):
                continue
            if a is not None and b is not None and a.algorithm is None and first.read(name) == second.read(name):
                continue
            if (a is not None and first.compiled(name)) or (b is not None and second.compiled(name)):
                compiled.append(name)
            elif PurePosixPath(name).name == VERSION_FILE:
                excluded.append(name)
            elif name.endswith(".py"):
                python.append(ChangedFile(path=name, before=first.read(name) if a else None,
                                          after=second.read(name) if b else None,
                                          mode=second.mode(name) if b else first.mode(name)))
            else:
                other.append(name)
        tops = sorted({n.split("/", 1)[0] for n in second.record if "/" in n})
        return WheelDiff(python=tuple(python), compiled=tuple(compiled), excluded=tuple(excluded),
                         other=tuple(other), package=tops[0] if len(tops) == 1 else ",".join(tops))
    finally:
        first.close()
        second.close()
