"""`hotfix show ID[@VERSION]`: everything a person who hit the crash needs to decide and act."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from vllm_hotfix.catalog.index import Catalog, parse_ref
from vllm_hotfix.catalog.model import Manifest, PatchSpec
from vllm_hotfix_guard.output import emit_json, say


def run(*, hotfix_id: str, catalogs: Sequence[Path] = (), as_json: bool = False) -> int:
    catalog = Catalog.load(catalogs)
    name, version = parse_ref(hotfix_id)
    manifest = catalog.get(name, version)
    versions = catalog.versions(manifest.id)
    if as_json:
        data = manifest.to_dict()
        data["latest"] = manifest is catalog.get(manifest.id)
        data["versions"] = list(versions)
        data["catalog"] = dict(catalog.origin(manifest).to_json(), shadows_builtin=catalog.shadows(manifest))
        for patch, spec in zip(data["patches"], manifest.patches):
            patch["path"] = str(manifest.patch_path(spec)) if spec.kind == "file" else None
        emit_json(data)
        return 0
    origin = catalog.origin(manifest)
    lines = render(manifest, versions, catalog_dir=None if origin is None or origin.builtin else origin.path)
    lines.insert(1, provenance(catalog, manifest))
    for line in lines:
        say(line)
    return 0


def provenance(catalog: Catalog, manifest: Manifest) -> str:
    """'From: built-in (…/manifests/x.toml)' / 'From: --catalog DIR (…)', and whether it shadows a built-in."""
    origin = catalog.origin(manifest)
    where = origin.describe() if origin is not None else "?"
    shadow = "; it shadows the built-in hotfix of the same id (allowed by --allow-shadow / HOTFIX_ALLOW_SHADOW)" \
        if catalog.shadows(manifest) else ""
    return f"From: {where} ({manifest.source}){shadow}"


def render(m: Manifest, versions: Sequence[int | str], catalog_dir: Path | None = None) -> list[str]:
    lines = [f"{m.id} (version {m.version}): {m.title}", ""]
    if m.kind == "advisory":
        lines.append("Kind: advisory (a known issue without a patch of its own)")
    if m.symptoms:
        lines.append("Symptoms:")
        lines += [f"  - {s}" for s in m.symptoms]
    if m.signatures:
        lines.append("Signatures (what `hotfix doctor` looks for in a log; only a specific one can name the fix):")
        for sig in m.signatures:  # one printed line each (a newline inside a line shows as a literal \\n)
            lines += [f"  {sig.tier:<8} {sig.role}" + ("" if sig.confirmed else "  (unconfirmed: written from a "
                                                       "description, not yet seen in a real log)"),
                      f"{'':<4}{sig.pattern}", f"{'':<4}{sig.explain}"]
    if m.confirm:
        lines.append("To confirm a \"possible\" match (doctor prints these):")
        for number, c in enumerate(m.confirm, 1):
            lines += [f"  {number}. {c.step}", f"{'':<5}→ {c.shows}"]
    if m.platforms:
        lines.append(f"Occurs on: {', '.join(m.platforms)} (doctor rules it out on a log of another platform)")
    if m.description:
        lines.append("Description:")
        lines += [f"  {line}".rstrip() for line in m.description.strip().splitlines()]
    lines.append("Applies to:")
    lines += [f"  {t.describe()} (import {t.package})" for t in m.targets]
    lines.append(f"Fixed upstream in: {m.fixed_in.describe() if m.fixed_in else 'not yet'}")
    if m.fixed_by:
        lines.append(f"Fixed by: hotfix {m.fixed_by} and later")
    if m.workaround:
        lines.append("Workaround:")
        lines += [f"  {line}".rstrip() for line in m.workaround.strip().splitlines()]
    if m.patches:
        lines.append("Patches, in order:")
    for index, spec in enumerate(m.patches, 1):
        lines += _patch_lines(m, index, spec)
    if m.compiled_changes:
        lines.append("Compiled files the release also changed (not in any patch; a rebuild or the release itself is needed):")
        lines += [f"  {path}" for path in m.compiled_changes]
    if m.requires:
        lines.append("Requires:")
        lines += [f"  {r.distribution} checkout: {r.git.describe()}" + (f" (usually {r.root_hint})" if r.root_hint else "")
                  for r in m.requires]
    if m.checks:
        lines.append("Checks after applying:")
        for check in m.checks:
            verb, text = ("contains", check.contains) if check.contains is not None else ("does not contain", check.not_contains)
            lines.append(f"  {check.file} {verb} {text!r}" + (f": {check.description}" if check.description else ""))
    if m.supersedes:
        lines.append(f"Supersedes (fully replaces) versions: {', '.join(map(str, m.supersedes))}")
    others = [str(v) for v in versions if str(v) != str(m.version)]
    if others:
        lines.append(f"Other versions: {', '.join(others)} (hotfix show {m.id}@VERSION)")
    if m.references:
        lines.append("References:")
        lines += [f"  [{r.kind}] {r.url}" + (f" {r.title}" if r.title else "") + (f" ({r.note})" if r.note else "")
                  for r in m.references]
    lines.append(f"Manifest: {m.source}")
    lines.append("")
    if m.kind == "advisory":
        lines.append("Check a log for it: hotfix doctor LOG")
        return lines
    import os
    import shlex

    where = f" --catalog {shlex.quote(os.path.abspath(catalog_dir))}" if catalog_dir is not None else ""
    # the target it needs: a checkout (--root) for a git baseline, else the interpreter that imports the package
    target = " --root CHECKOUT" if any(t.git for t in m.targets) else " --python PYTHON"
    lines.append(f"Try it: hotfix apply {m.id}{where}{target} --dry-run"
                 + (" --patch-file PATH" if any(p.kind == "external" for p in m.patches) else "")
                 + ("   (CHECKOUT: the vllm-ascend source tree Python imports)" if target.startswith(" --root") else
                    "   (PYTHON: the interpreter that runs vLLM; `hotfix where` shows what it loads)"))
    return lines


def _patch_lines(m: Manifest, index: int, spec: PatchSpec) -> list[str]:
    if spec.kind == "file":
        head = f"{spec.file} ({m.patch_path(spec)})"
    elif spec.kind == "external":
        head = f"{spec.external}: distributed separately, get it from {spec.url} and pass --patch-file PATH"
    else:
        head = f"upstream commit {spec.commit} of {spec.repo} (needs a local clone: --upstream-repo PATH)"
    lines = [f"  {index}. {head}"]
    if spec.description:
        lines.append(f"     {spec.description}")
    if spec.versions:
        lines.append(f"     for versions {spec.versions}")
    if spec.md5:
        lines.append(f"     md5     {spec.md5}")
    if spec.sha256:  # an external file may be pinned by md5 alone
        lines.append(f"     sha256  {spec.sha256}" + (" (of the normalised diff)" if spec.kind == "commit" else ""))
    if spec.stats:
        lines.append(f"     stats   {spec.stats.describe()}")
    details = [f"strip {spec.strip}"] + ([f"excludes {', '.join(spec.exclude)}"] if spec.exclude else [])
    lines.append(f"     {'; '.join(details)}")
    return lines
