"""Hotfix manifests: TOML -> the frozen dataclasses of catalog/model.py, validated strictly.

Every validation error is an ``InvalidInput`` whose message is ``<file>: <key path>: <problem>``,
e.g. ``manifests/x.toml: patches[1].sha256: expected 64 hex characters`` (array indices are
0-based). The only I/O here is reading the manifest file in ``load_manifest``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from vllm_hotfix.catalog.model import (
    ID_PATTERN, KINDS, REFERENCE_KINDS, SCHEMA, FixedIn, GitBaseline, Manifest, PatchSpec, PatchStats, PostCheck,
    Reference, Requirement, TargetSpec,
)
from vllm_hotfix.catalog.signatures import confirm_from_table, platforms_from, signature_from_table
from vllm_hotfix.catalog.table import Table, type_name
from vllm_hotfix_guard.core.data import load_toml
from vllm_hotfix_guard.core.pep440 import fixed_in_sets
from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix_guard.inputs import read_bounded as read_input, size_text

MANIFEST_CAP = 1024 * 1024  # the built-in manifests are 4-6 KB; a 200 MB one took 47 s and 600 MB to refuse


def load_manifest(path: Path | str, *, patches_dir: Path | None = None, raw: bytes | None = None) -> Manifest:
    """Read and validate one manifest file (``raw``: its bytes, read already); ``patches_dir`` defaults to
    ``<manifests>/../patches``."""
    path = Path(path)
    try:
        raw = read_input(path, cap=MANIFEST_CAP, what="manifest") if raw is None else raw
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read manifest: {exc.strerror or exc}") from None
    if len(raw) > MANIFEST_CAP:
        raise InvalidInput(f"{path}: manifest is over the {size_text(MANIFEST_CAP)} a manifest may be")
    data = load_toml(raw, str(path))
    if patches_dir is None:
        patches_dir = path.parent.parent / "patches"
    return manifest_from_dict(data, str(path), source_path=path, patches_dir=patches_dir)


# --- validation -------------------------------------------------------------------------------


def _package(table: Table, distribution: str) -> str:
    package = table.text("package", default=distribution.replace("-", "_"))
    if not all(part.isidentifier() for part in package.split(".")):
        raise table.error("package", f"not an importable package name: {package!r}")
    return package


def _git(table: Table | None) -> GitBaseline | None:
    if table is None:
        return None
    baseline = GitBaseline(
        commit=table.commit("commit"),
        tag=table.text("tag"),
        branch=table.text("branch"),
        clean=table.value("clean", (bool,), default=False),
    )
    if not baseline.rev:
        raise table.error(None, "needs at least one of commit, tag, branch")
    return baseline


def _version_value(table: Table, key: str, value: Any) -> int | str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise table.error(key, f"expected an integer or a string, got {type_name(value)}")
    if isinstance(value, str) and not value.strip():
        raise table.error(key, "must not be empty")
    return value


def _fixed_in(top: Table) -> FixedIn | None:
    if not top.has("fixed_in"):
        return None
    raw = top.data["fixed_in"]
    if isinstance(raw, str):
        fixed = FixedIn(version=raw)
        table = top
        key = "fixed_in"
    else:
        table = Table(raw, "fixed_in", top.source, ("version", "commit", "repo"))
        fixed = FixedIn(version=table.text("version"), commit=table.commit("commit"), repo=table.text("repo"))
        key = "version"
        if (fixed.version is None) == (fixed.commit is None):
            raise table.error(None, "needs exactly one of version, commit")
    if fixed.version is not None:
        try:
            fixed_in_sets(fixed.version)  # a version, or a union of specifier sets: the rule's own parser
        except ValueError as e:
            raise table.error(key, str(e)) from None
    return fixed


def _target(path: str, raw: Any, source: str) -> TargetSpec:
    table = Table(raw, path, source, ("distribution", "package", "versions", "git"))
    distribution = table.text("distribution", required=True)
    target = TargetSpec(
        distribution=distribution,
        package=_package(table, distribution),
        versions=table.specifier("versions"),
        git=_git(table.sub("git", ("commit", "tag", "branch", "clean"))),
    )
    if target.versions is None and target.git is None:
        raise table.error(None, "needs versions (a PEP 440 range) or git (a baseline), or both")
    return target


_PATCH_KEYS = ("file", "external", "url", "repo", "commit", "md5", "sha256", "strip", "exclude", "stats", "versions", "description")


def _patch(path: str, raw: Any, source: str) -> PatchSpec:
    table = Table(raw, path, source, _PATCH_KEYS)
    kinds = [k for k in ("file", "external", "commit") if table.has(k)]
    if len(kinds) != 1:
        raise table.error(None, "needs exactly one of file, external, commit (with repo)")
    kind = kinds[0]
    if kind != "commit" and table.has("repo"):
        raise table.error("repo", "only for commit patches")
    if kind != "external" and table.has("url"):
        raise table.error("url", "only for external patches")
    stats_table = table.sub("stats", ("files", "insertions", "deletions"))
    stats = None
    if stats_table is not None:
        counts = {}
        for key in ("files", "insertions", "deletions"):
            counts[key] = stats_table.value(key, (int,), required=True)
            if counts[key] < 0:
                raise stats_table.error(key, "must not be negative")
        stats = PatchStats(**counts)
    strip = table.value("strip", (int,), default=1)
    if strip < 0:
        raise table.error("strip", "must not be negative")
    spec = PatchSpec(
        kind=kind,
        file=table.relative_path("file"),
        external=table.text("external"),
        url=table.text("url", required=kind == "external"),
        repo=table.text("repo", required=kind == "commit"),
        commit=table.commit("commit"),
        md5=table.hexdigest("md5", 32),
        sha256=table.hexdigest("sha256", 64, required=not (kind == "external" and table.has("md5"))),
        strip=strip,
        exclude=table.strings("exclude"),
        stats=stats,
        versions=table.specifier("versions"),
        description=table.text("description"),
    )
    if spec.external is not None and ("/" in spec.external or spec.external in (".", "..")):
        raise table.error("external", f"expected a plain file name, got {spec.external!r}")
    return spec


def _requirement(path: str, raw: Any, source: str) -> Requirement:
    table = Table(raw, path, source, ("distribution", "package", "root_hint", "git"))
    distribution = table.text("distribution", required=True)
    git_table = table.sub("git", ("commit", "tag", "clean"))
    if git_table is None:
        raise table.error("git", "missing required key")
    return Requirement(
        distribution=distribution,
        package=_package(table, distribution),
        root_hint=table.text("root_hint"),
        git=_git(git_table),
    )


def _check(path: str, raw: Any, source: str) -> PostCheck:
    table = Table(raw, path, source, ("file", "contains", "not_contains", "description"))
    check = PostCheck(
        file=table.relative_path("file", required=True),
        contains=table.text("contains"),
        not_contains=table.text("not_contains"),
        description=table.text("description"),
    )
    if (check.contains is None) == (check.not_contains is None):
        raise table.error(None, "needs exactly one of contains, not_contains")
    return check


def _reference(path: str, raw: Any, source: str) -> Reference:
    table = Table(raw, path, source, ("kind", "url", "title", "note"))
    kind = table.text("kind", required=True)
    if kind not in REFERENCE_KINDS:
        raise table.error("kind", f"expected one of {', '.join(REFERENCE_KINDS)}, got {kind!r}")
    return Reference(kind=kind, url=table.text("url", required=True), title=table.text("title"), note=table.text("note"))


_TOP_KEYS = ("schema", "id", "version", "title", "description", "symptoms", "fixed_in", "supersedes",
             "references", "targets", "patches", "requires", "checks", "kind", "signatures", "workaround", "fixed_by",
             "compiled_changes", "conflicts", "after", "confirm", "platforms")


def _ids(top: "Table", key: str, own: str) -> tuple[str, ...]:
    """``conflicts`` / ``after``: other hotfix ids, each following the id rule."""
    raw = top.value(key, (list,), default=[])
    ids = []
    for index, value in enumerate(raw):
        if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
            raise top.error(f"{key}[{index}]", f"expected a hotfix id (lowercase letters, digits, '-'), got {value!r}")
        if value == own:
            raise top.error(f"{key}[{index}]", f"a hotfix cannot name itself ({value!r})")
        ids.append(value)
    return tuple(dict.fromkeys(ids))


def _kind_fields(top: Table) -> tuple[str, str | None, str | None]:
    """``kind``, ``workaround``, ``fixed_by``: an advisory has a workaround and no patches, a hotfix the reverse."""
    kind = top.text("kind", default="hotfix")
    if kind not in KINDS:
        raise top.error("kind", f"expected one of {', '.join(KINDS)}, got {kind!r}")
    workaround = top.text("workaround", required=kind == "advisory")
    fixed_by = top.text("fixed_by")
    if kind == "advisory":
        for key in ("patches", "checks", "requires", "supersedes"):
            if top.data.get(key):
                raise top.error(key, "an advisory has no patches (kind = \"advisory\"); make it a hotfix or drop the key")
        if fixed_by is not None:
            ref, _, version = fixed_by.partition("@")
            if not ID_PATTERN.fullmatch(ref) or not version:
                raise top.error("fixed_by", f"expected ID@VERSION of the hotfix that fixes it, got {fixed_by!r}")
    else:
        for key, value in (("workaround", workaround), ("fixed_by", fixed_by)):
            if value is not None:
                raise top.error(key, "only for kind = \"advisory\"")
    return kind, workaround, fixed_by


def manifest_from_dict(data: Mapping[str, Any], source: str, *, source_path: Path | None = None,
                       patches_dir: Path | None = None) -> Manifest:
    """Validate a parsed manifest (pure). ``source`` names the file in error messages."""
    top = Table(dict(data), "", source, _TOP_KEYS)
    schema = top.value("schema", (int,), required=True)
    if schema != SCHEMA:
        raise top.error("schema", f"unsupported schema {schema} (this vllm-hotfix reads schema {SCHEMA})")
    hotfix_id = top.text("id", required=True)
    if not ID_PATTERN.fullmatch(hotfix_id):
        raise top.error("id", f"expected lowercase letters, digits and '-' (starting with a letter or digit), got {hotfix_id!r}")
    if "version" not in top.data:
        raise top.error("version", "missing required key")
    version = _version_value(top, "version", top.data["version"])
    supersedes_raw = top.value("supersedes", (list,), default=[])
    supersedes = tuple(_version_value(top, f"supersedes[{i}]", v) for i, v in enumerate(supersedes_raw))
    if any(str(v) == str(version) for v in supersedes):
        raise top.error("supersedes", f"version {version} cannot supersede itself")
    kind, workaround, fixed_by = _kind_fields(top)
    conflicts, after = _ids(top, "conflicts", hotfix_id), _ids(top, "after", hotfix_id)
    both = sorted(set(conflicts) & set(after))
    if both:
        raise top.error("after", f"{both[0]!r} is also in conflicts: a hotfix cannot go on top of one it conflicts with")
    if kind == "advisory" and (conflicts or after):
        raise top.error("conflicts" if conflicts else "after", "an advisory has no patches to order")
    return Manifest(
        conflicts=conflicts,
        after=after,
        schema=schema,
        id=hotfix_id,
        version=version,
        title=top.text("title", required=True),
        description=top.text("description", default="") or "",
        symptoms=top.strings("symptoms"),
        kind=kind,
        signatures=tuple(signature_from_table(p, r, source) for p, r in top.tables("signatures")),
        confirm=tuple(confirm_from_table(p, r, source) for p, r in top.tables("confirm")),
        platforms=platforms_from(top),
        workaround=workaround,
        fixed_by=fixed_by,
        fixed_in=_fixed_in(top),
        supersedes=supersedes,
        references=tuple(_reference(p, r, source) for p, r in top.tables("references")),
        targets=tuple(_target(p, r, source) for p, r in top.tables("targets", required=True)),
        patches=tuple(_patch(p, r, source) for p, r in top.tables("patches", required=kind == "hotfix")),
        requires=tuple(_requirement(p, r, source) for p, r in top.tables("requires")),
        checks=tuple(_check(p, r, source) for p, r in top.tables("checks")),
        compiled_changes=top.relative_paths("compiled_changes"),
        source=source_path,
        patches_dir=patches_dir,
    )
