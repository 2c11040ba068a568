"""`hotfix status --vex`: the target's hotfix states as an OpenVEX 0.2.0 document, for scanners.

One statement per hotfix with a known upstream issue (a ``[[references]]`` of kind ``issue`` or
``advisory``: the vulnerability's ``@id`` is its URL, its name the short form such as
``vllm-project/vllm#53142``), for the target's package (``pkg:pypi/NAME@VERSION``):

- applied: ``fixed``; ``impact_statement`` names the hotfix (id@version) and the fingerprint of the
  hotfixes in effect (the one `status --json` prints and `export` writes into hotfix.lock);
- fixed-upstream: ``fixed`` (the release has the upstream fix);
- not-applied, lost, drifted: ``affected``, with the ``action_statement`` that applies it;
- anything else (not-applicable, unknown, stale, interrupted): no statement (nothing to claim).

Valid against the OpenVEX JSON schema (tests/commands/test_status_vex.py: check-jsonschema). No statement
to make is Refused (exit 3): an OpenVEX document holds at least one.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Optional, Sequence
from urllib.parse import urlsplit

from vllm_hotfix_guard.core.verdict import APPLIED, DRIFTED, FIXED_UPSTREAM, LOST, NOT_APPLIED
from vllm_hotfix_guard.errors import Refused
from vllm_hotfix_guard.output import emit_json

CONTEXT = "https://openvex.dev/ns/v0.2.0"
ISSUE_KINDS = ("issue", "advisory")


def run(*, hotfix_ids: Sequence[str], python: Optional[str], root: Optional[Path], catalogs: Sequence[Path],
        author: str = "vllm-hotfix") -> int:
    from vllm_hotfix import __version__
    from vllm_hotfix.catalog.index import Catalog
    from vllm_hotfix_guard.core.trust_policy import format_utc
    from vllm_hotfix.flow.survey import fingerprint, survey

    statuses = survey(hotfix_ids=hotfix_ids, python=python, root=root, catalogs=catalogs, with_catalog=True)
    counted = [s for s in statuses if hotfix_ids or s.recorded]
    digest = fingerprint(counted)
    catalog = Catalog.load(catalogs)
    now = format_utc(int(time.time()))
    statements = []
    for status in statuses:
        manifest = _manifest(catalog, status)
        statement = statement_for(status, manifest, digest, python) if manifest is not None else None
        if statement is not None:
            statements.append({**statement, "timestamp": now})
    if not statements:
        raise Refused("no hotfix here has a known upstream issue (a [[references]] of kind issue or advisory) and a "
                      "state to report: no VEX statement to make", hint="`hotfix status` shows the states")
    body = json.dumps(statements, sort_keys=True).encode()
    emit_json({"@context": CONTEXT, "@id": f"https://openvex.dev/docs/public/vex-{hashlib.sha256(body).hexdigest()}",
               "author": author, "timestamp": now, "version": 1, "tooling": f"vllm-hotfix {__version__}",
               "statements": statements})
    return 0


def _manifest(catalog, status):
    from vllm_hotfix_guard.errors import Refused as Unknown

    try:
        return catalog.get(status.id, status.version)
    except Unknown:
        return None


def statement_for(status, manifest, digest: str, python: Optional[str]) -> Optional[dict]:
    """The statement for one status (None: nothing to claim)."""
    issues = [r for r in manifest.references if r.kind in ISSUE_KINDS]
    if not issues or not status.distribution or not status.installed_version:
        return None
    vulnerability = {"@id": issues[0].url, "name": issue_name(issues[0].url),
                     "description": manifest.title}
    aliases = sorted({issue_name(r.url) for r in issues[1:]} - {vulnerability["name"]})
    if aliases:
        vulnerability["aliases"] = aliases
    purl = f"pkg:pypi/{status.distribution.lower().replace('_', '-')}@{status.installed_version}"
    statement = {"vulnerability": vulnerability, "products": [{"@id": purl, "identifiers": {"purl": purl}}],
                 "supplier": "vllm-hotfix catalog"}
    ref = f"{status.id}@{status.version}"
    if status.state == APPLIED:
        return {**statement, "status": "fixed",
                "impact_statement": f"fixed by vllm-hotfix hotfix {ref}, in effect on {status.target} "
                                    f"(hotfix set fingerprint {digest})",
                "status_notes": f"`hotfix status` decided from the files on disk: {ref} applied; fingerprint {digest}"}
    if status.state == FIXED_UPSTREAM:
        return {**statement, "status": "fixed",
                "status_notes": f"{status.distribution} {status.installed_version} contains the upstream fix "
                                f"({ref}: fixed-upstream)"}
    if status.state in (NOT_APPLIED, LOST, DRIFTED):
        where = f" --python {python}" if python else ""
        return {**statement, "status": "affected",
                "action_statement": f"apply the hotfix: hotfix apply {status.id}{where} (state now: {status.state})"}
    return None


def issue_name(url: str) -> str:
    """'https://github.com/vllm-project/vllm/issues/53142' -> 'vllm-project/vllm#53142'; else the URL."""
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    if parts.hostname == "github.com" and len(segments) == 4 and segments[2] in ("issues", "pull") \
            and segments[3].isdigit():
        return f"{segments[0]}/{segments[1]}#{segments[3]}"
    return url
