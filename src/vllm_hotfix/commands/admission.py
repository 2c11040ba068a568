"""`hotfix k8s --admission`: write a kustomization holding a ValidatingAdmissionPolicy, its binding and
the parameter ConfigMap of approved pairs (image digest -> fingerprints), so that pods in the named
namespaces run only approved images with approved hotfix sets (containers/admission_policy.py).

The approvals come from bundles (`--approve DIR`: a layout `hotfix pack` wrote, read back as input:
every blob checked against its digest, the layer against the config's diff_id, every file of the
layer against the bundle's own lock, whose fingerprint the annotations must name) and from locks
(`--approve IMAGE@sha256:DIGEST=LOCK`: an image, e.g. one `hotfix bake` built or the stock image a
ConfigMap overlay patches, that runs with that lock). The kustomization is staged beside --to,
rendered with `kubectl kustomize` when it is here and checked to be exactly the objects meant, then
put in place whole (txn/staged.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from vllm_hotfix.containers import admission_policy, bundle
from vllm_hotfix.containers.bundle_read import digests, read_bundle  # noqa: F401 - admission's own too
from vllm_hotfix_guard.errors import Refused, UsageError
from vllm_hotfix_guard.output import emit_json, note, quote_path, say

STAGE_SUFFIX = ".hotfix-admission"


def run(*, approve=(), namespaces=(), params_namespace: str = admission_policy.PARAMS_NAMESPACE, warn_only: bool = False,
        trust: Optional[Path] = None, out_dir: Path, overlay_options=(), dry_run: bool = False, as_json: bool = False) -> int:
    if overlay_options:
        raise UsageError(f"{', '.join(overlay_options)}: an option of the overlay, not of --admission",
                         hint="write the overlay and the policy in two runs: `hotfix k8s --base ...` and `hotfix k8s --admission ...`")
    out = Path(os.path.realpath(out_dir))
    refuse_foreign(out)
    import time

    from vllm_hotfix_guard.txn import signed

    now = time.time()
    policy = signed.load_policy(trust, now=now)  # as `verify --lock` finds it: --trust, HOTFIX_TRUST, the pinned one
    approvals = [a for source in approve for a in approvals_from(source, policy=policy, now=now)]
    made = admission_policy.build(approvals, namespaces=namespaces, params_namespace=params_namespace, warn_only=warn_only)
    from vllm_hotfix.commands.k8s import kustomize_command

    renderer = kustomize_command()
    if renderer is not None:
        problems = admission_policy.check_render(_render(renderer, made.files), made)
        if problems:
            raise Refused(f"`{' '.join(renderer)}` does not render what was meant: {problems[0]}; nothing was written")
    if not dry_run:
        from vllm_hotfix.txn.staged import write_directory

        write_directory(out, made.files, suffix=STAGE_SUFFIX, what="the admission policy")
    data = made.objects[1]["data"]
    if as_json:
        emit_json({"to": str(out), "dry_run": dry_run, "policy": admission_policy.NAME, "namespaces": sorted(set(namespaces)),
                   "params": {"namespace": params_namespace, "name": admission_policy.NAME},
                   "validation_actions": made.objects[3]["spec"]["validationActions"],
                   "approved": [{"digest": f"sha256:{d}", "fingerprints": v.split()} for d, v in data.items()],
                   "sources": [{"digest": f"sha256:{a.digest}", "fingerprint": a.fingerprint, "source": a.source}
                               for a in approvals],
                   "files": sorted(made.files), "rendered_with": " ".join(renderer) if renderer else None,
                   "trust": None if policy is None else {"policy_version": policy.version, "threshold": policy.threshold}})
        return 0
    verb = "would write" if dry_run else "wrote"
    action = "warn and audit" if warn_only else "deny"
    say(f"{verb} {quote_path(str(out))}/kustomization.yaml: ValidatingAdmissionPolicy {admission_policy.NAME} ({action}) "
        f"for pods in {', '.join(sorted(set(namespaces)))}, {len(data)} approved image digest(s) in ConfigMap "
        f"{params_namespace}/{admission_policy.NAME}")
    for a in approvals:
        say(f"  sha256:{a.digest} -> {a.fingerprint}  ({a.source})")
    if renderer:
        say(f"checked: `{' '.join(renderer)}` renders exactly these objects")
    else:
        note(f"kubectl (or kustomize) is not on PATH: not rendered; check it with `kubectl kustomize {out}`")
    if dry_run:
        say("dry run: nothing was written")
    else:
        say(f"next: kubectl apply -k {quote_path(str(out))}")
        say(f"(Kubernetes >= 1.30; from then on a pod there needs every image pinned by digest and the annotation "
            f"{admission_policy.FINGERPRINT_ANNOTATION}: <its fingerprint>)")
    return 0


def approvals_from(source: str, *, policy=None, now: float = 0.0) -> list[admission_policy.Approval]:
    """The approved pairs one --approve names: a bundle directory, or IMAGE@sha256:DIGEST=LOCK. With a
    trust ``policy``, its lock must pass txn.signed's verdict (the bundle's signature files are the
    ones in its layer beside the lock; a lock file's those beside it): Untrusted, exit 11-15, otherwise."""
    if Path(source).is_dir():
        return bundle_approvals(Path(source), policy=policy, now=now)
    image, sep, lock_file = source.partition("=")
    name, at, digest = image.rpartition("@sha256:")
    if not sep or not at or not name or not lock_file:
        raise UsageError(f"--approve {source!r}: neither a bundle directory nor IMAGE@sha256:DIGEST=LOCK",
                         hint="e.g. --approve bundle/ or --approve registry.example/vllm@sha256:<64 hex>=hotfix-export/hotfix.lock")
    from vllm_hotfix_guard.core.docfields import is_hex64
    from vllm_hotfix_guard.txn.hotfix_lock import read_lock
    from vllm_hotfix_guard.txn.lock_check import expected_fingerprint

    if not is_hex64(digest):
        raise UsageError(f"--approve {source!r}: the digest must be sha256: and 64 lowercase hex digits")
    data, lock = read_lock(Path(lock_file))
    signed = _trusted(Path(lock_file), data, lock, policy, now=now, subject=quote_path(lock_file))
    return [admission_policy.Approval(digest=digest, fingerprint=expected_fingerprint(lock),
                               source=f"{_what(lock)} (image {quote_path(name)}, lock {quote_path(lock_file)}){signed}")]


def _trusted(lock_path: Path, data: bytes, lock, policy, *, now: float, subject: str, signatures=None) -> str:
    """Nothing without a policy; else txn.signed's verdict on the lock (the one that `verify --lock`
    and the guard follow): Untrusted with its exit code (11-15) when refused, else ", signed by ..."."""
    if policy is None:
        return ""
    from vllm_hotfix_guard.txn import signed

    verdict = signed.lock_verdict(lock_path, data, lock, policy, now=now, subject=subject, signatures=signatures)
    for warning in verdict.warnings:
        note(warning)
    signed.refuse(verdict, hint="approve only what the release team signed: sign the lock (`hotfix sign LOCK --key "
                                "KEY`) with enough listed keys, then pack it again; nothing was written")
    return f", {verdict.summary()[len(verdict.subject) + 2:]}"


def bundle_approvals(directory: Path, *, policy=None, now: float = 0.0) -> list[admission_policy.Approval]:
    """The digest of the bundle (what index.json names) and of each platform's manifest, approved for
    the fingerprint of the lock the bundle carries, after checking all of it (and, with a policy, the
    lock against the signature files the layer holds beside it)."""
    from vllm_hotfix_guard.core.minisign import is_signature_name

    source = quote_path(str(directory))
    layout, found = read_bundle(directory)
    if found.guard is None:  # read_bundle checked a guard against the lock; none at all is not approved
        raise Refused(f"{source} carries no guard: a pod mounting it would run its fix with nothing checking it; "
                      "nothing was written", hint="pack an export that has its guard (`hotfix export` without --no-guard)")
    signatures = [(e.path, e.data) for e in found.extra if "/" not in e.path and is_signature_name(e.path, bundle.LOCK_PATH)]
    signed = _trusted(directory / bundle.LOCK_PATH, found.lock_bytes, found.lock, policy, now=now,
                      subject=f"{source}'s {bundle.LOCK_PATH}", signatures=signatures)
    what = f"{_what(found.lock)} (bundle {source}){signed}"
    return [admission_policy.Approval(digest=d, fingerprint=found.fingerprint, source=what) for d in digests(layout)]


def _what(lock) -> str:
    return f"{' '.join(f'{h.id}@{h.version}' for h in lock.hotfixes)} for {bundle.baseline(lock)}"


def _render(renderer: list[str], files: dict) -> list:
    from vllm_hotfix.commands.k8s import render

    scratch = Path(tempfile.mkdtemp(prefix="hotfix-admission-"))
    try:
        for name, data in files.items():
            (scratch / name).write_bytes(data)
        return render(renderer, scratch, what="the admission policy")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def refuse_foreign(out: Path) -> None:
    """--to may be new, empty, or a directory this command wrote (replaced whole): never anything else."""
    from vllm_hotfix_guard.inputs import read_bounded
    from vllm_hotfix.txn.staged import check_replaceable

    def ours(directory: Path) -> bool:
        return read_bounded(directory / "kustomization.yaml", cap=1 << 20, what="kustomization",
                            follow_symlinks=False).startswith(admission_policy.HEADER)

    check_replaceable(out, ours, what="an admission policy written by `hotfix k8s --admission`",
                      hint="pass --to a new directory (e.g. k8s/admission)")
