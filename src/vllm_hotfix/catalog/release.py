"""A catalog release: ``release.json``, the signed metadata, and the archive it names.

``release.json`` (canonical JSON: sorted keys, one-space indent, a final newline; what the minisign
signatures ``release.json.minisig / release.json.<KEYID>.minisig`` cover, byte for byte)::

    {"schema": 1, "kind": "vllm-hotfix-catalog-release", "version": 4, "expires": "2027-01-06T00:00:00Z",
     "archive": {"name": "catalog-<sha256 prefix>.tar.gz", "sha256": "...", "size": 1234},
     "files": {"manifests/x.toml": {"sha256": "...", "size": 812}, "patches/x.patch": {...}}}

``version`` only grows (a subscriber refuses a lower one: rollback, and the same one with other bytes);
``expires`` bounds how long a subscriber serves it (freeze). The archive's name carries its digest, so
a release directory can be replaced while a subscriber downloads (the old metadata names the old
archive, a new one a new name). Pure: bytes in, bytes or values out.
"""

from __future__ import annotations

import hashlib
import json

from vllm_hotfix.catalog.release_archive import build_archive, member_problem
from vllm_hotfix_guard.txn.catalog_sums import tampered_lines
from vllm_hotfix_guard.core import trust_policy
from vllm_hotfix_guard.core.docfields import Fields
from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix_guard.values import Value

KIND = "vllm-hotfix-catalog-release"
METADATA = "release.json"
METADATA_LIMIT = 16 << 20
ARCHIVE_LIMIT = 256 << 20
MAX_VERSION = 10 ** 15


class FileEntry(Value):
    sha256: str
    size: int


class Release(Value):
    """The metadata of one release, validated."""

    version: int
    expires: str
    archive_name: str
    archive_sha256: str
    archive_size: int
    files: tuple  # of (path, FileEntry), sorted by path

    def file_map(self) -> dict:
        return dict(self.files)

    def to_json(self) -> dict:
        return {"version": self.version, "expires": self.expires, "archive": self.archive_name,
                "archive_sha256": self.archive_sha256, "files": len(self.files)}


def archive_name(digest: str) -> str:
    return f"catalog-{digest[:16]}.tar.gz"


def build(files: dict[str, bytes], *, version: int, expires: str) -> tuple[bytes, bytes, str]:
    """(metadata bytes, archive bytes, archive name) of a release of ``files`` (path -> bytes)."""
    for path in files:
        problem = member_problem(path)
        if problem:
            raise InvalidInput(f"{path!r}: cannot be published ({problem})")
    archive = build_archive(files)
    digest = hashlib.sha256(archive).hexdigest()
    doc = {"schema": 1, "kind": KIND, "version": version, "expires": expires,
           "archive": {"name": archive_name(digest), "sha256": digest, "size": len(archive)},
           "files": {path: {"sha256": hashlib.sha256(body).hexdigest(), "size": len(body)}
                     for path, body in files.items()}}
    parse(dump(doc), "the release being published")  # what is written is what a subscriber accepts
    return dump(doc), archive, archive_name(digest)


def dump(doc: dict) -> bytes:
    return (json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=True) + "\n").encode("ascii")


def parse(data: bytes, source: str) -> Release:
    """The metadata in ``data``, strictly: canonical bytes only, every field checked (InvalidInput naming
    the key path)."""
    from vllm_hotfix_guard.core.data import load_json

    doc = load_json(data, source)
    fields = Fields(source)
    fields.mapping(doc, "")
    unknown = sorted(set(doc) - {"schema", "kind", "version", "expires", "archive", "files"})
    if unknown:
        raise fields.fail(unknown[0], "unknown key")
    if doc.get("schema") != 1 or doc.get("kind") != KIND:
        raise fields.fail("schema", f"not a catalog release (expected schema 1, kind {KIND!r})")
    version = fields.get(doc, "", "version", int)
    if not 0 < version < MAX_VERSION:
        raise fields.fail("version", f"expected 1 .. {MAX_VERSION - 1}, got {version}")
    expires = fields.text(doc, "", "expires", limit=32)
    if trust_policy.parse_utc(expires) is None:
        raise fields.fail("expires", f"expected YYYY-MM-DDTHH:MM:SSZ, got {expires!r}")
    archive = fields.mapping(doc.get("archive"), "archive")
    digest = fields.sha256(archive, "archive", "sha256")
    name = fields.text(archive, "archive", "name", limit=64)
    if name != archive_name(digest):
        raise fields.fail("archive.name", f"expected {archive_name(digest)!r}, got {name!r}")
    size = _size(fields, archive, "archive", ARCHIVE_LIMIT)
    entries = []
    for path, entry in sorted(fields.mapping(doc.get("files"), "files").items()):
        where = fields.at("files", path)
        problem = member_problem(path)
        if problem:
            raise fields.fail(where, f"unsafe path ({problem})")
        fields.mapping(entry, where)
        entries.append((path, FileEntry(sha256=fields.sha256(entry, where, "sha256"),
                                        size=_size(fields, entry, where, ARCHIVE_LIMIT))))
    if not any(p.startswith("manifests/") for p, _ in entries):
        raise fields.fail("files", "no manifests/ file: not a catalog")
    if dump(doc) != data:
        raise InvalidInput(f"{source}: not in canonical form (sorted keys, one-space indent)",
                           hint="publish it with `hotfix catalog publish`")
    return Release(version=version, expires=expires, archive_name=name, archive_sha256=digest,
                   archive_size=size, files=tuple(entries))


def _size(fields: Fields, doc: dict, where: str, cap: int) -> int:
    value = fields.get(doc, where, "size", int)
    if not 0 <= value <= cap:
        raise fields.fail(fields.at(where, "size"), f"expected 0 .. {cap}, got {value}")
    return value


def check_files(release: Release, files: dict[str, bytes], subject: str) -> list[str]:
    """TAMPERED lines: each archive member missing from the metadata, listed but missing, or with other
    bytes than the metadata's sha256 and size (empty: every file is what was signed)."""
    return tampered_lines(subject, {path: (f.sha256, f.size) for path, f in release.file_map().items()}, files)
