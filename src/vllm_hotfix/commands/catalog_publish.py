"""`hotfix catalog publish DIR --to OUT --key KEY...`: a catalog release (catalog/release.py) in OUT.

OUT is written whole (txn/staged.py): ``release.json``, one signature per --key (the first key's in minisign's
default ``release.json.minisig``, a further key's in ``release.json.<KEYID>.minisig``: core/minisign.placed_name),
and ``catalog-<sha256 prefix>.tar.gz``. Byte-reproducible: the same catalog, version, expiry and keys
give the same bytes (the signatures' trusted comment is ``version:N<TAB>expires:E<TAB>file:release.json
<TAB>hashed``, no time stamp; Ed25519 signatures are deterministic). The version only grows: OUT's
previous release must be lower (else Refused, exit 3); by default it is that one's plus 1.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Mapping, Optional

from vllm_hotfix_guard.errors import InvalidInput, Refused, UsageError
from vllm_hotfix_guard.output import emit_json, quote_path, say

DEFAULT_EXPIRY = "30d"


def run(*, directory: Path, out_dir: Path, keys: tuple, password_file: Optional[Path], version: Optional[int],
        expires: Optional[str], dry_run: bool, as_json: bool, oci_dir: Optional[Path] = None,
        env: Optional[Mapping[str, str]] = None, now: Optional[float] = None) -> int:
    from vllm_hotfix.catalog import release as release_format
    from vllm_hotfix.catalog.index import CatalogDir, load_dir
    from vllm_hotfix_guard.txn.catalog_sums import catalog_files
    from vllm_hotfix.commands.sign import unsealed_key
    from vllm_hotfix.core import signing
    from vllm_hotfix_guard.core import minisign

    env = os.environ if env is None else env
    now = time.time() if now is None else now
    if not keys:
        raise UsageError("name at least one secret key with --key (one signature file per key)")
    if not (Path(directory) / "manifests").is_dir():
        raise UsageError(f"{quote_path(str(directory))} is not a catalog: no manifests/ directory in it")
    load_dir(CatalogDir(Path(directory), "catalog publish"))  # a catalog that does not load is never published
    files = catalog_files(Path(directory))
    previous = _previous_version(Path(out_dir))
    version = _version(version, previous)
    expiry = expiry_time(expires or DEFAULT_EXPIRY, now)
    metadata, archive, archive_name = release_format.build(files, version=version, expires=expiry)
    comment = f"version:{version}\texpires:{expiry}\tfile:{release_format.METADATA}\thashed"
    tree = {release_format.METADATA: metadata, archive_name: archive}
    key_ids, first = [], None
    for key in keys:
        signing_key = unsealed_key(Path(key), password_file, env)
        first = signing_key.key_id if first is None else first  # the holder of the default name (`hotfix sign`'s rule)
        name = minisign.placed_name(release_format.METADATA, signing_key.key_id, None if first == signing_key.key_id else first)
        if name in tree:
            raise UsageError(f"{quote_path(str(key))}: the same key twice (key id {signing_key.public_key.id_text})")
        tree[name] = minisign.format_signature(signing.sign(metadata, signing_key, trusted_comment=comment))
        key_ids.append(signing_key.public_key.id_text)
    if not dry_run:
        _write(Path(out_dir), tree)
        if oci_dir is not None:
            _write_oci(Path(oci_dir), tree)
    if as_json:
        emit_json({"out": str(out_dir), "version": version, "previous": previous, "expires": expiry,
                   "archive": archive_name, "files": len(files), "key_ids": key_ids, "dry_run": dry_run,
                   "written": sorted(tree), "oci": str(oci_dir) if oci_dir else None})
        return 0
    verb = "would write" if dry_run else "wrote"
    say(f"{verb} catalog release {version} to {quote_path(str(out_dir))}: {len(files)} files in {archive_name}, "
        f"expires {expiry}, signed by {len(key_ids)} key(s) ({', '.join(key_ids)})")
    say(f"serve that directory over HTTPS; hosts subscribe with `hotfix catalog add NAME https://HOST/PATH/ "
        f"--trust POLICY`")
    if oci_dir is not None:
        say(f"{verb} the OCI artifact layout {quote_path(str(oci_dir))}; push it with `skopeo copy "
            f"oci:{quote_path(str(oci_dir))}:latest docker://REGISTRY/PATH:latest`")
    return 0


def expiry_time(text: str, now: float) -> str:
    """``--expires``: an RFC 3339 UTC time (YYYY-MM-DDTHH:MM:SSZ) or a duration from now ('30d', '12h')."""
    from vllm_hotfix_guard.core import trust_policy

    if trust_policy.parse_utc(text) is not None:
        moment = trust_policy.parse_utc(text)
    else:
        seconds = trust_policy.parse_duration(text)
        if seconds is None:
            raise UsageError(f"--expires {text!r}: expected YYYY-MM-DDTHH:MM:SSZ or a duration such as 30d, 12h")
        moment = int(now) + seconds
    if moment <= now:
        raise UsageError(f"--expires {text!r}: already past; a release must expire in the future")
    return trust_policy.format_utc(moment)


def _version(given: Optional[int], previous: Optional[int]) -> int:
    if given is None:
        return (previous or 0) + 1
    if previous is not None and given <= previous:
        raise Refused(f"--version {given} is not above the release already there ({previous}); a release's version "
                      f"only grows (subscribers refuse a lower one)", hint=f"use --version {previous + 1} or leave it out")
    return given


def _previous_version(out_dir: Path) -> Optional[int]:
    from vllm_hotfix.catalog.release import METADATA, METADATA_LIMIT, parse
    from vllm_hotfix_guard.inputs import read_bounded

    try:
        return parse(read_bounded(out_dir / METADATA, cap=METADATA_LIMIT, what="release metadata"),
                     str(out_dir / METADATA)).version
    except FileNotFoundError:
        return None
    except (InvalidInput, OSError):
        return None  # not ours: check_replaceable refuses to write over it


def _ours(out_dir: Path) -> bool:
    return _previous_version(out_dir) is not None


def _write(out_dir: Path, tree: dict) -> None:
    from vllm_hotfix.txn.staged import check_replaceable, write_directory

    check_replaceable(out_dir, _ours, what="a catalog release written by `hotfix catalog publish`",
                      hint="publish into a new or empty directory")
    write_directory(out_dir, tree, suffix=".hotfix-release", what="the catalog release")


def _ours_oci(layout: Path) -> bool:
    from vllm_hotfix.catalog.release_oci import ARTIFACT_TYPE

    index = layout / "index.json"
    return index.is_file() and ARTIFACT_TYPE.encode() in index.read_bytes()[:1 << 20]


def _write_oci(layout: Path, tree: dict) -> None:
    from vllm_hotfix.catalog.release_oci import layout_files
    from vllm_hotfix.txn.staged import check_replaceable, write_directory

    check_replaceable(layout, _ours_oci, what="a catalog release layout written by `hotfix catalog publish --oci`",
                      hint="give --oci a new or empty directory")
    write_directory(layout, layout_files(tree), suffix=".hotfix-release-oci", what="the catalog release's OCI layout")
