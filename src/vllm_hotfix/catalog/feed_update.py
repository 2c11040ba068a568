"""`hotfix catalog update`'s one decision: may this published release replace the cached one? Then the swap.

In this order, each refusal with its exit code (errors.ExitCode) and nothing written:
1. ``release.json`` and the signature files for the policy's keys (``release.json.<KEYID>.minisig``, and
   minisign's default ``release.json.minisig``) fetched, capped; signed by ``threshold`` distinct listed
   keys (core/trust_policy.evaluate: 11 unsigned, 12 under the threshold, 13 tampered);
2. the metadata parsed strictly (8); its ``expires`` ahead (15, the policy's ``expired``/``grace`` as
   for a lock) and its ``version`` not below the policy's ``min_version`` (14);
3. not a rollback against the cached release: a lower version, or the same version with other bytes (14);
   the same bytes: already current, nothing fetched further;
4. the archive fetched (capped at the signed size), its sha256 the signed one (13), every member a safe
   regular file (8) whose sha256 and size are the signed ones, none missing or added (13);
5. every manifest loads (catalog/manifest.py, 8);
then commands/catalog_feed.py replaces the cached release directory whole (txn/staged.write_directory:
staged beside, fsynced, two renames). A refusal at any step leaves the cached copy byte-identical.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Optional

from vllm_hotfix.catalog import feeds
from vllm_hotfix.catalog.fetch import check_url, fetch, session, where
from vllm_hotfix.catalog.release import ARCHIVE_LIMIT, METADATA, METADATA_LIMIT, Release, check_files, parse
from vllm_hotfix.catalog.release_archive import read_archive
from vllm_hotfix_guard.core import minisign, trust_policy
from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix_guard.values import Value

HINT = "the cached catalog is unchanged; ask the catalog's publisher (`hotfix catalog publish`) for a release " \
       "the policy accepts"


class Outcome(Value):
    name: str
    status: str  # "updated" | "current"
    version: int
    expires: str
    previous: Optional[int]
    signers: tuple
    warnings: tuple = ()

    def to_json(self) -> dict:
        return self.as_dict()


def update(subscription: feeds.Subscription, *, now: float) -> tuple[Outcome, Optional[dict]]:
    """The outcome, and the cached release directory's new files (relative path -> bytes; None: already
    current) for commands/catalog_feed.py to swap in whole; raises the refusal otherwise."""
    from vllm_hotfix_guard.txn.signed import load_policy

    policy = load_policy(subscription.trust, now=now)
    base = check_url(subscription.url)
    subject = f"catalog {subscription.name} ({where(base, METADATA)})"
    http = session() if base.startswith("https:") else None
    data = fetch(base, METADATA, cap=METADATA_LIMIT, ca=subscription.ca, session=http)
    if data is None:
        from vllm_hotfix_guard.errors import Unavailable

        raise Unavailable(f"{where(base, METADATA)}: not found: no catalog release published there")
    signatures = _signatures(base, policy, subscription.ca, http)
    _refuse(trust_policy.evaluate(data, signatures, policy, now=now, subject=subject, versioned=False))
    release = parse(data, where(base, METADATA))
    verdict = trust_policy.evaluate(data, signatures, policy, now=now, subject=subject, version=release.version,
                                    expires=release.expires)
    _refuse(verdict)
    cached_bytes, cached = feeds.read_cached(subscription.name)
    _check_rollback(subject, release, data, cached, cached_bytes, verdict)
    outcome = Outcome(name=subscription.name, status="updated", version=release.version, expires=release.expires,
                      previous=cached.version if cached else None, signers=verdict.signers, warnings=verdict.warnings)
    if cached_bytes == data:
        return Outcome(**{**outcome.as_dict(), "status": "current"}), None
    try:
        archive = fetch(base, release.archive_name, cap=min(release.archive_size, ARCHIVE_LIMIT), ca=subscription.ca,
                        session=http)
    except InvalidInput as exc:  # larger than signed, or a layout blob that is not its bytes: not the signed archive
        _refuse_lines(verdict, [f"TAMPERED: {subject}: the archive {release.archive_name} is not the signed one "
                                f"({exc.message})"])
    if archive is None or hashlib.sha256(archive).hexdigest() != release.archive_sha256:
        found = "missing" if archive is None else f"sha256 {hashlib.sha256(archive).hexdigest()[:12]}..."
        _refuse_lines(verdict, [f"TAMPERED: {subject}: the archive {release.archive_name} is not the signed one "
                                f"({found}, signed {release.archive_sha256[:12]}...)"])
    files = read_archive(archive, where(base, release.archive_name))
    _refuse_lines(verdict, check_files(release, files, subject))
    _check_loads(files, subscription.name)
    tree = {METADATA: data, **{sig_name: body for sig_name, body in signatures}}
    tree.update({f"{feeds.CATALOG_DIR}/{path}": body for path, body in files.items()})
    return outcome, tree


def _signatures(base: str, policy: trust_policy.Policy, ca: Optional[str], http) -> list[tuple[str, bytes]]:
    names = [minisign.signature_name(METADATA, k.key.key_id) for k in policy.keys] + [minisign.signature_name(METADATA)]
    found = []
    for name in names:
        body = fetch(base, name, cap=minisign.SIGNATURE_FILE_LIMIT, ca=ca, session=http)
        if body is not None:
            found.append((name, body))
    return found


def _check_rollback(subject: str, release: Release, data: bytes, cached: Optional[Release],
                    cached_bytes: Optional[bytes], verdict: trust_policy.TrustDecision) -> None:
    if cached is None or cached_bytes == data:
        return
    if release.version < cached.version:
        why = f"version {release.version} is below the cached release's {cached.version}"
    elif release.version == cached.version:
        why = f"version {release.version} is the cached release's, with other contents (a release's version must grow)"
    else:
        return
    _refuse_lines(verdict, [f"ROLLBACK: {subject}: {why}"], kind=trust_policy.ROLLBACK)


def _refuse(verdict: trust_policy.TrustDecision) -> None:
    from vllm_hotfix_guard.txn.signed import refuse

    refuse(verdict, hint=HINT)


def _refuse_lines(verdict: trust_policy.TrustDecision, lines: list[str], kind: str = trust_policy.TAMPERED) -> None:
    if lines:
        _refuse(trust_policy.TrustDecision(subject=verdict.subject, signers=verdict.signers,
                                           threshold=verdict.threshold, checks=verdict.checks,
                                           refusals=tuple(trust_policy.Refusal(kind, line) for line in lines)))


def _check_loads(files: dict[str, bytes], name: str) -> None:
    """Every manifest of the release loads with its patches, and beside the built-in catalog (no id and
    version twice; no built-in id without HOTFIX_ALLOW_SHADOW=1): else InvalidInput, before anything is
    swapped -- a release every command would then refuse to load is never cached."""
    import os

    from vllm_hotfix.catalog.index import SHADOW_ENV, Catalog, CatalogDir, builtin_dir, load_dir

    with tempfile.TemporaryDirectory(prefix="hotfix-catalog-check-") as scratch:
        root = Path(scratch)
        for path, body in files.items():
            target = root.joinpath(*path.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(body)
        (root / "patches").mkdir(exist_ok=True)
        try:
            released = load_dir(CatalogDir(root, f"subscribed catalog {name}"))
            builtin = load_dir(CatalogDir(builtin_dir(), "built-in"))
            Catalog(builtin + released)
            shadowing = sorted({m.id for m in released} & {m.id for m in builtin})
            if shadowing and os.environ.get(SHADOW_ENV) != "1":
                raise InvalidInput(f"the release of {name} redefines the built-in hotfix {shadowing[0]}",
                                   hint=f"its publisher renames it, or set {SHADOW_ENV}=1 to let it stand beside "
                                        f"the built-in one")
        except InvalidInput as exc:
            raise InvalidInput(exc.message.replace(scratch, f"<release of {name}>"), hint=HINT) from None

