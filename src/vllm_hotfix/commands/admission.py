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

from vllm_hotfix.containers import admission_policy, bundle, oci
from vllm_hotfix_guard.errors import InvalidInput, Refused, UsageError
from vllm_hotfix_guard.output import emit_json, note, quote_path, say

STAGE_SUFFIX = ".hotfix-admission"
LAYER_LIMIT = 512 << 20  # a bundle's compressed layer; the 1,160-file backport is ~10 MB
CONTENT_LIMIT = 1 << 30  # what it may unpack to (a gzip bomb stops here)


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
    signatures = [(e.path, e.data) for e in found.extra if "/" not in e.path and is_signature_name(e.path, bundle.LOCK_PATH)]
    signed = _trusted(directory / bundle.LOCK_PATH, found.lock_bytes, found.lock, policy, now=now,
                      subject=f"{source}'s {bundle.LOCK_PATH}", signatures=signatures)
    what = f"{_what(found.lock)} (bundle {source}){signed}"
    return [admission_policy.Approval(digest=d, fingerprint=found.fingerprint, source=what) for d in digests(layout)]


def digests(layout: oci.ReadLayout) -> list[str]:
    """The hex digests a pod may pin a bundle by: what index.json names, and each platform's manifest."""
    return [layout.top.hex] + [image.manifest.hex for image in layout.images if image.manifest.hex != layout.top.hex]


def read_bundle(directory: Path) -> tuple[oci.ReadLayout, bundle.Content]:
    """A layout `hotfix pack` wrote, read as untrusted input: only index.json and blobs/sha256/<hex> are
    read (names built here, confined), each a regular file opened without following a link, below real
    directories (blobs/, blobs/sha256/ lstat'ed), capped; every blob against its digest and size, the
    layer against the config's diff_id (unpacked at most CONTENT_LIMIT), every file against the bundle's
    own lock, the annotations of each image and of the index against that lock (InvalidInput otherwise)."""
    import stat

    from vllm_hotfix_guard.inputs import read_bounded

    source = quote_path(str(directory))
    for inner in ("blobs", oci.BLOBS):
        try:
            if not stat.S_ISDIR(os.lstat(directory / inner).st_mode):
                raise InvalidInput(f"{source}: {inner} is not a directory (a link is not followed)",
                                   hint="is it a layout `hotfix pack` wrote?")
        except FileNotFoundError:
            break  # read_file names the missing file
        except OSError as exc:
            raise InvalidInput(f"{source}: {inner}: {exc.strerror}") from None

    def read_file(name: str, cap: int) -> bytes:
        try:
            return read_bounded(directory / name, cap=cap, what="OCI layout file", follow_symlinks=False)
        except OSError as exc:
            raise InvalidInput(f"{source}: {name}: {exc.strerror}", hint="is it a layout `hotfix pack` wrote?") from None

    layout = oci.read(source, read_file)
    blob = oci.blob_reader(source, read_file)
    checked: dict = {}  # layer descriptor -> its content (platforms share one layer)
    for image in layout.images:
        if len(image.layers) != 1:
            raise InvalidInput(f"{source}: {image.manifest.digest} has {len(image.layers)} layers; a hotfix bundle has one")
        if image.layers[0] not in checked:
            members = oci.layer_members(source, blob, image.layers[0], image.diff_ids[0], cap=LAYER_LIMIT,
                                        content_cap=CONTENT_LIMIT)
            checked[image.layers[0]] = bundle.check(members, source=source, annotated=image.annotations)
        bundle.check_annotations(checked[image.layers[0]], image.annotations, source=source)
    locks = {c.lock_bytes for c in checked.values()}
    if len(locks) != 1:
        raise InvalidInput(f"{source}: its platforms carry different locks; a hotfix bundle carries one")
    found = next(iter(checked.values()))
    bundle.check_annotations(found, layout.annotations, source=source)
    return layout, found


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
