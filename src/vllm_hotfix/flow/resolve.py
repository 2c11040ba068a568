"""One target resolution: which install or checkout a `--python` / `HOTFIX_PYTHON` / `--root` names,
and which records belong to it. Every command calls this; records are keyed by what it returns.

``--python`` is resolved by the probe in that interpreter (a venv directory works too), honouring
PYTHONPATH, .pth files, setuptools editable finders and direct_url.json, exactly as `import` does;
the target's root (site-packages for a wheel, the project for an editable or git checkout) keys its
record (paths.TargetDir).

With neither ``--python`` nor ``HOTFIX_PYTHON`` (a pipx / `uv tool` install of hotfix has its own venv,
without vLLM): hotfix's own interpreter if it imports the package, else the interpreter behind the
`vllm` command on PATH (said in one line on stderr), else a refusal that lists the candidates found.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from vllm_hotfix_guard.core.distname import import_name
from vllm_hotfix_guard.errors import HotfixError, Refused
from vllm_hotfix.install.interpreters import SERVER_COMMAND, candidate_interpreters, server_interpreter
from vllm_hotfix.install.locate import (Target, interpreter_path, is_this_interpreter, locate_package, locate_root,
                                        start_probe)
from vllm_hotfix_guard.output import note, quote_path

SERVER_PACKAGE = "vllm"  # what the interpreter that runs vLLM imports: the guard's plugin loader lives there

if TYPE_CHECKING:  # types only: `verify --lock` at container start must not pay for `packaging` / TOML
    from vllm_hotfix.catalog.index import Catalog
    from vllm_hotfix.catalog.model import Manifest, TargetSpec
    from vllm_hotfix_guard.txn.state import TargetState


def target_option(target: Target, catalog: Catalog | None = None, also: Iterable[str | None] = ()) -> str:
    """How to name this target again on a command line, for the next step a command prints: ``--python``
    or ``--root``, then catalog_words. Every word is quoted for a POSIX shell, so it runs as pasted."""
    import shlex

    words = ["--python", target.python] if target.python is not None else ["--root", str(target.root)]
    return " ".join(shlex.quote(str(w)) for w in words + catalog_words(catalog, also))


def catalog_words(catalog: Catalog | None, also: Iterable[str | os.PathLike | None] = ()) -> list[str]:
    """``--catalog DIR`` for each directory the command was given (``catalog``'s --catalog dirs; HOTFIX_CATALOG
    ones come with the environment) and each of ``also`` it did not load (the catalog a record was applied
    from; the --catalog paths of a command that loads no catalog, `verify --lock`), once each, absolute:
    what a printed next step needs to find the same hotfixes (unquoted words). Made absolute as the kernel
    resolves them (``link/..`` is kept, not folded away as os.path.abspath would)."""
    dirs = [d.path for d in catalog.dirs if d.origin == "--catalog"] if catalog is not None else []
    loaded = {os.path.realpath(d.path) for d in catalog.dirs} if catalog is not None else set()
    for extra in also:
        if extra and os.path.realpath(extra) not in loaded:
            loaded.add(os.path.realpath(extra))
            dirs.append(Path(extra))
    return [word for folder in dirs for word in ("--catalog", str(Path(folder).absolute()))]


def warn(target: Target) -> None:
    """The one way a target's warnings reach the user (`apply`, `audit`, `status`, `verify`): one stderr
    line each, ``hotfix: warning: ...`` -- a PYTHONPATH or .pth overlay shadowing the installed package,
    several copies on sys.path, a RECORD that does not list what is loaded (install/locate.py words them).
    Each is said once per process, however often the target is resolved."""
    for warning in target.warnings:
        if warning not in _warned:
            _warned.add(warning)
            note(f"warning: {warning}")


_warned: set[str] = set()


def target_summary(target: Target) -> dict:
    """The target as state.json records it and `apply --json` reports it."""
    summary = {"root": str(target.root), "package": target.package, "distribution": target.distribution,
               "version": target.version, "kind": target.kind, "python": target.python}
    if target.commit:  # a checkout's release is its HEAD as much as its version (core.verdict.release_seen)
        summary["commit"] = target.commit
    return summary


class Resolver:
    """Resolves packages for one `--python` / `--root`, each at most once (a probe is a process)."""

    def __init__(self, python: str | None = None, root: Path | None = None, *, guard: str | None = None):
        self.python = python
        self.root = Path(root) if root is not None else None
        self.guard = guard  # probe.GUARD_ENTRY_POINTS / GUARD_LOAD: every probe also answers whether vLLM
        # would load the guard there (Target.guard)
        self._cache: dict[tuple, Target | HotfixError] = {}

    def package(self, package: str | None, *, do_import: bool = False) -> Target:
        """The target `import PACKAGE` loads (--python), or the checkout (--root). Refused if not importable.
        A distribution name works as well (``vllm-ascend``: ``core.distname.import_name``)."""
        package = import_name(package) if package is not None else None
        key = (package, do_import)
        if key not in self._cache:
            try:
                if self.root is not None:
                    self._cache[key] = locate_root(self.root, package)
                else:
                    self._cache[key] = self._locate(package, do_import)
            except Refused as exc:
                self._cache[key] = exc
        found = self._cache[key]
        if isinstance(found, HotfixError):
            raise found
        return found

    def resolved(self) -> list[Target]:
        """The targets resolved so far (each once), for commands that describe them after a survey."""
        found: dict[str, Target] = {}
        for target in self._cache.values():
            if isinstance(target, Target):
                found.setdefault(str(target.root), target)
        return list(found.values())

    def runs_here(self) -> bool:
        """Whether the packages are resolved in the interpreter running hotfix (after a resolution:
        the one it settled on, e.g. the `vllm` command's when hotfix's own has no vLLM)."""
        return self.root is None and (self.python is None or is_this_interpreter(interpreter_path(self.python)))

    def guard_target(self, package: str = SERVER_PACKAGE) -> Target:
        """A target resolved with the guard's facts (``Resolver(guard=...)``): any one resolved so far
        (they all come from the one interpreter this resolver settled on), else ``package``'s."""
        assert self.guard and self.root is None
        for target in self.resolved():
            if target.guard is not None:
                return target
        return self.package(package)

    def prefetch(self) -> None:
        """A head start for a command that will resolve a package with --python: the probe's interpreter
        starts now, while the command loads the rest of itself, and ``package()`` hands it the name
        (the answer is the same; only the wait shrinks). Nothing to do for --root or hotfix's own
        interpreter."""
        if self.root is None and self.python is not None:
            start_probe(self.python, guard=self.guard)

    def _locate(self, package: str | None, do_import: bool) -> Target:
        assert package is not None
        if self.python is not None:
            return locate_package(package, self.python, do_import, self.guard)
        try:
            return locate_package(package, None, do_import, self.guard)
        except Refused as own:
            server = server_interpreter()
            if server is None:
                candidates = candidate_interpreters(package=package)
                listed = (f"; interpreters here that can import {package}: " + ", ".join(map(quote_path, candidates))
                          if candidates else "")
                raise Refused(own.message, hint=f"no `{SERVER_COMMAND}` command on PATH either: pass --python PATH "
                              f"(or set HOTFIX_PYTHON) with the interpreter that runs vLLM{listed}; for a source "
                              "checkout, pass --root with the checkout's directory") from None
            command, python = server
            note(f"using {python}, the interpreter of {command} on PATH (hotfix's own python has no {package}; "
                 "--python or HOTFIX_PYTHON picks another)")
            self.python = python
            return locate_package(package, python, do_import, self.guard)

    def for_manifest(self, manifest: Manifest) -> tuple[Target, TargetSpec | None]:
        """The target the manifest is about, and the manifest target entry that matches it
        (``Manifest.spec_for``; None: none)."""
        if self.root is not None:
            specs = [s for s in manifest.targets if (self.root / s.package).is_dir()] or list(manifest.targets)
            target = self.package(specs[0].package)
            return target, manifest.spec_for(target)
        error: HotfixError | None = None
        for spec in manifest.targets:
            try:
                target = self.package(spec.package)
            except Refused as exc:
                error = exc
                continue
            return target, manifest.spec_for(target)
        assert error is not None
        raise error

    def targets(self, catalog: Catalog | None) -> list[Target]:
        """Every target this `--python` / `--root` names: each package a catalog hotfix or a record is
        about, as this interpreter resolves it (one per root), or the `--root` checkout."""
        if self.root is not None:
            return [self.package(None if not _recorded_package(self.root) else _recorded_package(self.root))]
        packages = sorted(set(_catalog_packages(catalog)) | set(recorded_packages()))
        found: dict[str, Target] = {}
        for package in packages:
            try:
                target = self.package(package)
            except Refused:
                continue  # not importable by this interpreter
            found.setdefault(str(Path(target.root).resolve()), target)
        return list(found.values())

    def records(self, catalog: Catalog | None) -> list[tuple[Target, TargetState]]:
        """(target, its record) for every target of this `--python` / `--root` that has a record or an
        interrupted transaction."""
        from vllm_hotfix_guard.paths import TargetDir
        from vllm_hotfix_guard.txn.state import TargetState

        out = []
        for target in self.targets(catalog):
            tdir = TargetDir.of(target.root)
            state = TargetState.load(tdir.directory)
            if state.hotfixes or tdir.pending():
                out.append((target, state))
        return out


def _catalog_packages(catalog: Catalog | None) -> Iterable[str]:
    for manifest in catalog.latest() if catalog is not None else ():
        for spec in manifest.targets:
            yield spec.package


def recorded_packages() -> list[str]:
    """Import names that records in this state directory are about (state.json's target.package), read
    by the one reader of the format; a record that cannot be read names none."""
    from vllm_hotfix_guard.errors import InvalidInput
    from vllm_hotfix_guard.paths import all_target_dirs  # here: `verify --lock` pays for hashlib after its probe started
    from vllm_hotfix_guard.txn.state import TargetState

    names = set()
    for tdir in all_target_dirs():
        try:
            package = TargetState.load(tdir.directory).target.get("package")
        except InvalidInput:
            continue
        if package:
            names.add(package)
    return sorted(names)


def _recorded_package(root: Path) -> str | None:
    from vllm_hotfix_guard.paths import TargetDir
    from vllm_hotfix_guard.txn.state import TargetState

    state = TargetState.load(TargetDir.of(root).directory)
    package = state.target.get("package")
    return package if isinstance(package, str) and (Path(root) / package).is_dir() else None
