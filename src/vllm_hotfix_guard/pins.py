"""The catalog's pin of a recorded hotfix, where a catalog is at hand in this process (issue 43: one
verdict in every mode). `hotfix status` judges a catalog hotfix's record against the pin of the catalog it
loads (the md5 / sha256 of the manifest's patches for the recorded release); the guard under HOTFIX_REQUIRE
asks the same question (txn/judgement.pin_problem, check 6 of record_problem) of the catalogs this process
can read without vllm-hotfix's CLI:

- the built-in catalog, when vllm-hotfix is installed beside the guard (``vllm_hotfix/_catalog`` in the same
  site-packages, or a source checkout's root): its manifests are named ``<id>.toml``;
- each ``HOTFIX_CATALOG`` directory set in the process's environment (every ``manifests/*.toml`` read).

The first manifest with the record's id and version is the pin, built-in first (a user catalog cannot
redefine a built-in id: catalog/index.py). No manifest of that id and version at hand: nothing to pin by,
as in `status`. Only the fields the pin needs are read (``id``, ``version``, ``kind``, each patch's ``md5``,
``sha256``, ``versions``), with core/data.load_toml (``tomllib``; ``tomli`` on Python 3.10, which
vllm-hotfix installs there; neither: no catalog at hand). A manifest that does not read is not at hand:
the CLI refuses it as a whole, the guard says nothing new. Stdlib only; imported only for a record under
HOTFIX_REQUIRE, and reads a manifest only for a catalog hotfix's record.

Under a trust policy with ``catalogs = "signed"`` (HOTFIX_TRUST, or the image's pinned one), a
HOTFIX_CATALOG directory counts only when txn/catalog_sums.directory_verdict -- the verdict `hotfix`
refuses such a directory by (catalog/index.py) -- accepts it, and its manifests are read from the very
bytes judged. One that does not verify (or a policy that cannot be used) gives no pin, and since `hotfix
status` then refuses to run at all (exit 11-13, 2 or 8), ``at_hand`` returns a ``Refusal``: recorded.py
calls every required record unknown with its line and advice. Checked only when HOTFIX_CATALOG is set.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

from vllm_hotfix_guard.values import Value

MANIFEST_CAP = 1024 * 1024  # catalog/manifest.py's cap


def builtin_dirs() -> tuple[Path, ...]:
    """Where the built-in catalog is when vllm-hotfix is installed beside the guard (its wheel's
    ``vllm_hotfix/_catalog``), or the guard runs from a source checkout (whose root is a catalog)."""
    site = Path(__file__).resolve().parents[1]  # site-packages, or src/ of a checkout
    return (site / "vllm_hotfix" / "_catalog", site.parent)


def catalog_dirs(environ=None) -> list[tuple[Path, bool]]:
    """(catalog directory, built-in) in the order `hotfix` reads them: built-in, then HOTFIX_CATALOG."""
    environ = os.environ if environ is None else environ
    dirs = [(d, True) for d in builtin_dirs() if (d / "manifests").is_dir() and (d / "patches").is_dir()][:1]
    return dirs + [(Path(d), False) for d in environ.get("HOTFIX_CATALOG", "").split(os.pathsep) if d]


class Refusal(Value):
    """Why the catalogs at hand cannot be used (a guard line's detail, without its state word) and what to do."""

    detail: str
    remedy: str


def at_hand(environ=None) -> tuple[list, Optional[Refusal]]:
    """([(catalog directory, built-in, its files as judged or None)] that may pin, in ``catalog_dirs``'
    order; the refusal of the first HOTFIX_CATALOG directory the trust policy does not accept, or None)."""
    environ = os.environ if environ is None else environ
    dirs = [(folder, builtin, None) for folder, builtin in catalog_dirs(environ)]
    if all(builtin for _, builtin, _ in dirs):
        return dirs, None
    import time

    from vllm_hotfix_guard.errors import HotfixError
    from vllm_hotfix_guard.output import visible
    from vllm_hotfix_guard.txn import signed

    now = time.time()
    try:
        if signed.policy_path(None, environ) is None:  # no policy: nothing more is imported or read
            return dirs, None
        from vllm_hotfix_guard.txn import catalog_sums

        policy = catalog_sums.catalog_policy(environ, now=now)
    except HotfixError as exc:  # status refuses to run: no user catalog is used, nothing is in effect
        return [d for d in dirs if d[1]], Refusal(
            f"HOTFIX_CATALOG is set and the trust policy cannot be used: {visible(exc.message)}",
            exc.hint or "fix the trust policy (HOTFIX_TRUST) or unset it")
    if policy is None:
        return dirs, None
    kept, refusal = [], None
    for folder, builtin, _ in dirs:
        if builtin:
            kept.append((folder, builtin, None))
            continue
        try:
            verdict, files = catalog_sums.directory_verdict(folder, policy, now=now)
            lines = [r.line for r in verdict.refusals]
        except HotfixError as exc:
            lines = [f"{catalog_sums.subject(folder)}: {exc.message}"]
        if not lines:
            kept.append((folder, builtin, files))
        elif refusal is None:
            refusal = Refusal(f"HOTFIX_CATALOG holds a catalog the trust policy does not accept (catalogs = "
                              f"\"signed\"): {visible('; '.join(lines))}",
                              f"{catalog_sums.sign_advice(folder)} (`hotfix status` refuses it too), or remove it "
                              f"from HOTFIX_CATALOG")
    return kept, refusal


def pinned(state, release: Optional[str], environ=None, dirs=None) -> Optional[Callable]:
    """txn/judgement's ``pinned`` for the records of ``state``: the catalog's pin of each catalog hotfix
    (None: no catalog hotfix recorded, nothing to read). ``dirs``: ``at_hand``'s (else found here)."""
    from vllm_hotfix_guard.txn.judgement import pin_problem

    if not any(r.source == "catalog" for r in state.hotfixes.values()):
        return None
    dirs = at_hand(environ)[0] if dirs is None else dirs

    def problem(recorded) -> Optional[str]:
        if recorded.source != "catalog":
            return None
        found = manifest_pins(recorded.id, recorded.version, state.target.get("version") or release, dirs=dirs)
        return None if found is None else pin_problem(state, recorded, found[1], found[0])
    return problem


def manifest_pins(hotfix_id: str, version, release: Optional[str], environ=None, *,
                  dirs=None) -> Optional[tuple[str, list]]:
    """(the manifest's ref, [(md5, sha256)] of its patches for ``release``) of the first manifest at hand
    (``dirs``, else ``at_hand(environ)``'s) with this id and version (core/pep440.same_version, the CLI's
    rule), or None (none at hand; an advisory; no patch for this release)."""
    from vllm_hotfix_guard.core.pep440 import same_version

    for folder, builtin, files in at_hand(environ)[0] if dirs is None else dirs:
        if files is not None:  # judged by the trust policy: read from those very bytes, never again
            from vllm_hotfix_guard.txn.catalog_sums import is_manifest

            names = [(folder / name, files[name]) for name in sorted(files) if is_manifest(name)]
        else:
            names = [(p, None) for p in ([folder / "manifests" / f"{hotfix_id}.toml"] if builtin else _manifests(folder))]
        for path, data in names:
            doc = _read(path, data)
            if doc is None or doc.get("id") != hotfix_id or not same_version(doc.get("version"), version):
                continue
            if doc.get("kind") == "advisory":
                return None
            chosen = _for_release(doc.get("patches"), release)
            return (f"{hotfix_id}@{doc.get('version')}", chosen) if chosen else None  # none: applicability says why
    return None


def _manifests(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in (folder / "manifests").iterdir() if p.suffix == ".toml")
    except OSError:
        return []


def _read(path: Path, data: Optional[bytes] = None) -> Optional[dict]:
    """The manifest's TOML as a dict (from ``data`` when read already), or None when it is not there or
    does not read (not at hand)."""
    from vllm_hotfix_guard.errors import InvalidInput
    from vllm_hotfix_guard.inputs import read_bounded

    try:
        data = read_bounded(path, cap=MANIFEST_CAP, what="manifest") if data is None else data
    except (InvalidInput, OSError):
        return None
    if len(data) > MANIFEST_CAP:  # judged bytes are capped as catalog files: a manifest is refused above this
        return None
    from vllm_hotfix_guard.core.data import load_toml  # tomllib (tomli on 3.10)

    try:
        doc = load_toml(data, str(path))
    except (InvalidInput, ImportError):  # 3.10 without tomli: no catalog at hand
        return None
    return doc if isinstance(doc, dict) else None


def _for_release(patches, release: Optional[str]) -> list:
    """catalog/model.Manifest.patches_for's choice, by its rule (core/pep440.range_takes): unranged patches
    always, ranged ones when they take ``release``; a ``versions`` that is not a string takes nothing."""
    from vllm_hotfix_guard.core.pep440 import range_takes

    out = []
    for p in patches if isinstance(patches, list) else ():
        versions = p.get("versions") if isinstance(p, dict) else False
        if (versions is None or isinstance(versions, str)) and range_takes(versions, release):
            out.append((_text(p.get("md5")), _text(p.get("sha256"))))
    return out


def _text(value) -> Optional[str]:
    return value if isinstance(value, str) else None
