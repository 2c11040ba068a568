"""Does a hotfix belong on a target: its range, the fix already upstream, preconditions on other checkouts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from vllm_hotfix.catalog.model import Manifest, TargetSpec
from vllm_hotfix_guard.core.verdict import FIXED_UPSTREAM, NOT_APPLICABLE
from vllm_hotfix_guard.errors import FixedUpstream, Refused, UsageError
from vllm_hotfix.install.locate import Target


@dataclass(frozen=True)
class Inapplicable:
    """Why a hotfix does not apply to a target (fixed upstream or outside its range)."""

    state: str  # verdict.FIXED_UPSTREAM | verdict.NOT_APPLICABLE
    message: str
    advice: str | None = None


def _describe_target(target: Target) -> str:
    name = target.distribution or target.package
    return f"{name} {target.version}" if target.version else f"{name} at {target.root}"


def applicability(manifest: Manifest, spec: TargetSpec | None, target: Target) -> Inapplicable | None:
    """Why this hotfix cannot go on this target (fixed upstream / outside the range), or None."""
    where = _describe_target(target)
    if spec is None:
        wanted = ", ".join(t.describe() for t in manifest.targets)
        return Inapplicable(NOT_APPLICABLE, f"not applicable: {where} is not a target of {manifest.ref} ({wanted})")

    def commit_checker(commit: str, repo: str | None) -> bool:
        from vllm_hotfix.install import git as gitmod

        return target.git is not None and gitmod.has_commit(target.root, commit) and gitmod.is_ancestor(target.root, commit)

    if manifest.is_fixed_in(target.version, commit_checker):
        return Inapplicable(FIXED_UPSTREAM, f"{manifest.id}: {where} already contains the upstream fix "
                                       f"({manifest.fixed_in.describe()}); nothing to apply",
                       "nothing to do; remove this hotfix from your deployment scripts")
    if target.version is None and spec.git is not None and target.git is not None:
        from vllm_hotfix.install import git as gitmod

        wrong_head = gitmod.check_baseline(target.root, spec.git.rev, allow=("*",))
        if wrong_head:
            return Inapplicable(NOT_APPLICABLE, f"not applicable: {wrong_head[0]}")
    if spec.versions is not None:
        if target.version is None and spec.git is None:
            return Inapplicable(NOT_APPLICABLE, f"not applicable: the version of {where} is unknown; "
                                           f"{manifest.ref} needs {spec.distribution} {spec.versions}")
        if target.version is not None and not spec.contains(target.version):
            return Inapplicable(NOT_APPLICABLE, f"not applicable: {where} is outside {spec.versions}")
    return None


def release_target(spec: TargetSpec, release: str) -> Target:
    """A published release as a target (a wheel read from the index, or the release a log names): what
    ``applicability`` judges when there is no install to look at (check-catalog, doctor)."""
    where = Path(f"<{spec.distribution}-{release}.whl>")
    return Target(package=spec.package, distribution=spec.distribution, version=release, kind="wheel",
                  package_dir=where / spec.package, root=where, dist_info=None, python=None, git=None, warnings=())


def check_applicable(manifest: Manifest, spec: TargetSpec | None, target: Target, catalog=None) -> None:
    """Refused (or FixedUpstream) when ``manifest`` is not for ``target``; the hint's `hotfix show` names the
    --catalog dirs of ``catalog`` (the loaded catalog: resolve.catalog_words), so it runs as pasted."""
    verdict = applicability(manifest, spec, target)
    if verdict is None:
        return
    if verdict.state == FIXED_UPSTREAM:
        raise FixedUpstream(verdict.message, hint=verdict.advice)
    import shlex

    from vllm_hotfix.flow.resolve import catalog_words

    show = shlex.join(["hotfix", "show", manifest.id, *catalog_words(catalog)])
    raise Refused(f"{manifest.ref}: {verdict.message}", hint=f"`{show}` lists its targets")


def parse_checkouts(values: Sequence[str]) -> dict[str, Path]:
    """``--checkout DIST=DIR`` options as a mapping."""
    checkouts: dict[str, Path] = {}
    for value in values:
        dist, sep, directory = value.partition("=")
        if not sep or not dist or not directory:
            raise UsageError(f"--checkout {value!r}: expected DIST=DIR, e.g. vllm=/vllm-workspace/vllm")
        checkouts[dist.strip()] = Path(directory)
    return checkouts


def check_requires(manifest: Manifest, checkouts: dict[str, Path] | None = None) -> None:
    """Preconditions on other checkouts, found via ``--checkout DIST=DIR`` or at their ``root_hint``."""
    from vllm_hotfix.install import git as gitmod

    for index, requirement in enumerate(manifest.requires):
        what = f"{manifest.ref}: requires[{index}] ({requirement.distribution} {requirement.git.describe()})"
        given = (checkouts or {}).get(requirement.distribution)
        where = given or (Path(requirement.root_hint) if requirement.root_hint else None)
        if where is None or not where.is_dir():
            raise Refused(f"{what}: no {requirement.distribution} checkout at {where or '(no root_hint)'}",
                          hint=f"pass --checkout {requirement.distribution}=DIR with the checkout's directory")
        problems = gitmod.check_baseline(where, requirement.git.rev, allow=() if requirement.git.clean else ("*",))
        if problems:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            raise Refused(f"{what}: {problems[0]}{more}", hint="restore that checkout (git checkout / git stash) and retry")
