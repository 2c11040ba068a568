"""`hotfix catalog watch --write`'s line edits of a manifest: a [[targets]] table's ``versions``, the
[[patches]] ranges (catalog/manifest_text.edit_patches) and a top-level ``fixed_in``. Every other byte
stays; the result is loaded with the strict loader and must be exactly the intended manifest, else
InvalidInput (edit it by hand)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Mapping, Optional

from vllm_hotfix.catalog.manifest import manifest_from_dict
from vllm_hotfix.catalog.manifest_text import edit_patches, toml_value
from vllm_hotfix.catalog.model import FixedIn, Manifest
from vllm_hotfix_guard.core.data import load_toml
from vllm_hotfix_guard.errors import InvalidInput

_TABLE_HEADER = re.compile(r"^\s*\[")
_TARGETS_HEADER = re.compile(r"^\s*\[\[\s*targets\s*\]\]\s*(#.*)?$")
_VERSIONS_KEY = re.compile(r"^\s*versions\s*=")
_FIXED_IN_KEY = re.compile(r"^\s*fixed_in\s*=")
_MULTILINE_OPEN = re.compile(r'^\s*[A-Za-z0-9_-]+\s*=\s*("""|\'\'\')')


def edit_manifest(text: str, source: str, manifest: Manifest, *, target_index: int, target_versions: Optional[str],
                  patch_versions: Mapping[int, Optional[str]], fixed_in: Optional[str]) -> str:
    """``text`` with targets[target_index].versions, the patches' versions and (when given) fixed_in set."""
    if patch_versions:
        text = edit_patches(text, source, manifest, versions=patch_versions, added=[])
    lines = text.split("\n")
    if target_versions is not None:
        starts = [i for i, line in enumerate(lines) if _TARGETS_HEADER.match(line)]
        if len(starts) != len(manifest.targets):
            raise InvalidInput(f"{source}: found {len(starts)} [[targets]] tables but the manifest has "
                               f"{len(manifest.targets)}; edit it by hand")
        first = starts[target_index]
        end = next((j for j in range(first + 1, len(lines)) if _TABLE_HEADER.match(lines[j])), len(lines))
        key = next((j for j in range(first + 1, end) if _VERSIONS_KEY.match(lines[j])), None)
        if key is None:
            raise InvalidInput(f"{source}: targets[{target_index}] has no versions line to edit; edit it by hand")
        lines[key] = f"versions = {toml_value(target_versions)}"
    if fixed_in is not None:
        _set_fixed_in(lines, source, fixed_in)
    result = "\n".join(lines)
    _check(result, source, manifest, target_index, target_versions, patch_versions, fixed_in)
    return result


def _set_fixed_in(lines: list[str], source: str, fixed_in: str) -> None:
    top_end = next((i for i, line in enumerate(lines) if _TABLE_HEADER.match(line)), len(lines))
    if any(_FIXED_IN_KEY.match(line) for line in lines[:top_end]):
        raise InvalidInput(f"{source}: already declares fixed_in; edit it by hand")
    version = next((i for i in range(top_end) if re.match(r"^\s*version\s*=", lines[i])), None)
    if version is None or _MULTILINE_OPEN.match(lines[version]):
        raise InvalidInput(f"{source}: no one-line top-level version key to put fixed_in after; edit it by hand")
    lines.insert(version + 1, f"fixed_in = {toml_value(fixed_in)}")


def _check(result: str, source: str, manifest: Manifest, target_index: int, target_versions: Optional[str],
           patch_versions: Mapping[int, Optional[str]], fixed_in: Optional[str]) -> None:
    loaded = manifest_from_dict(load_toml(result.encode(), source), source, patches_dir=manifest.patches_dir)
    targets = list(manifest.targets)
    if target_versions is not None:
        targets[target_index] = replace(targets[target_index], versions=target_versions)
    patches = tuple(replace(p, versions=patch_versions[i]) if i in patch_versions else p
                    for i, p in enumerate(manifest.patches))
    wanted = replace(manifest, targets=tuple(targets), patches=patches,
                     fixed_in=FixedIn(version=fixed_in) if fixed_in is not None else manifest.fixed_in)
    if loaded != wanted:
        raise InvalidInput(f"{source}: the edit would change other keys than the watched ranges; edit it by hand")
