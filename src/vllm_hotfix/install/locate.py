"""Which files does ``import PACKAGE`` load, from what install: a Target for commands to work on."""

from __future__ import annotations

import errno
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_hotfix_guard.errors import Refused, UsageError, WriteFailed
from vllm_hotfix_guard.install import facts as install_facts
from vllm_hotfix_guard.install import probe as probe_module

if TYPE_CHECKING:
    from vllm_hotfix.install.git import GitInfo

PROBE_TIMEOUT = 120.0


@dataclass(frozen=True)
class GuardFacts:
    """Whether vLLM run by the probed interpreter loads the guard (install/probe.guard_facts, gathered there)."""

    entry_points: tuple[str, ...]   # the vllm.general_plugins entry points named vllm_hotfix_guard, first first
    load_error: str | None          # what loading the first one raised (None: it loads, or it was not loaded)
    loaded: bool = False            # the first one was loaded (probe --guard-load, or in this process)


@dataclass(frozen=True)
class Target:
    """What `import PACKAGE` loads and from what install: the answer every command acts on."""

    package: str                    # import name, e.g. 'vllm'
    distribution: str | None        # 'vllm', 'vllm-ascend'
    version: str | None
    kind: str                       # 'wheel' | 'editable' | 'git' | 'directory'
    package_dir: Path               # directory of the package that is loaded
    root: Path                      # what patch paths are relative to
    dist_info: Path | None
    python: str | None              # interpreter probed (None for --root)
    git: GitInfo | None
    warnings: tuple[str, ...]
    origin: Path | None = None      # the __init__.py find_spec resolves
    import_file: str | None = None  # `PACKAGE.__file__` after a real import (--import)
    import_error: str | None = None
    python_version: str | None = None
    copies: tuple[Path, ...] = field(default=())   # every copy on sys.path, the loaded one first
    sys_path: tuple[str, ...] = field(default=())
    version_from: str | None = None  # a checkout's derived version: what from, e.g. 'git tag v0.30.0' (install/version.py)
    version_file: str | None = None  # ... and the file under the root it was read from, if it was ('vllm/_version.py')
    guard: GuardFacts | None = None  # asked for (probe --guard): would vLLM load the guard in this interpreter?
    commit: str | None = None       # a checkout's HEAD as its files say (install/facts.read_head): names its release

    @property
    def has_record(self) -> bool:
        return self.dist_info is not None and (self.dist_info / "RECORD").is_file()

    def to_json(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "distribution": self.distribution,
            "version": self.version,
            "version_derived": self.version_from is not None,
            "version_from": self.version_from,
            "commit": self.commit,
            "kind": self.kind,
            "path": str(self.package_dir),
            "origin": str(self.origin) if self.origin else None,
            "root": str(self.root),
            "dist_info": str(self.dist_info) if self.dist_info else None,
            "python": self.python,
            "python_version": self.python_version,
            "git": self.git.to_json() if self.git else None,
            "import_file": self.import_file,
            "import_error": self.import_error,
            "copies": [str(c) for c in self.copies],
            "sys_path": list(self.sys_path),
            "warnings": list(self.warnings),
        }


def is_this_interpreter(interpreter: str) -> bool:
    """``interpreter`` is the one running hotfix (same venv, same executable), so its facts need no process."""
    here = os.path.abspath(sys.executable)
    there = os.path.abspath(interpreter)
    try:
        return os.path.dirname(there) == os.path.dirname(here) and os.path.samefile(there, here)
    except OSError:
        return False


_started: dict[tuple[str, bool, str | None], Any] = {}  # probes started ahead of need: (interpreter, import, guard)


def interpreter_path(python: str | None) -> str:
    """The interpreter a --python value names (a venv directory names its bin/python); None: this one."""
    interpreter = python or sys.executable
    if os.path.isdir(interpreter) and os.path.exists(os.path.join(interpreter, "bin", "python")):  # never raise:
        interpreter = str(Path(interpreter) / "bin" / "python")  # a venv given by its directory (EACCES: run_probe says)
    return interpreter


# Every interpreter this tool starts runs in a session of its own: a Ctrl-C on the terminal reaches hotfix
# alone, which decides what it means (before the commit point: undo, exit 130; after it: the change stands,
# exit 0 with a note), never a probe half-way through a check (issue 45: a killed post-apply probe undid a
# committed apply and blamed the interpreter). Popen / subprocess.run take these.
CHILD = {"start_new_session": True}


def _spawn_probe(interpreter: str, do_import: bool, guard: str | None = None):
    """The probe process, waiting for the package name on stdin."""
    import subprocess  # here: in-process probing (the common case at container start) needs none

    source = Path(probe_module.__file__).read_text(encoding="utf-8")
    argv = [interpreter, "-c", source, "-"] + (["--import"] if do_import else []) + (["--guard"] if guard else []) \
        + (["--guard-load"] if guard == probe_module.GUARD_LOAD else [])
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **CHILD)


def start_probe(python: str | None = None, do_import: bool = False, guard: str | None = None) -> None:
    """Start the probe's interpreter now, before the package is known: its start-up (most of a
    probe's cost) runs while the command loads the rest of itself and reads its input, and
    ``run_probe`` hands it the package name (`verify --lock --python` at container start). Only the
    timing changes -- same argv, environment and working directory, same handling of the output; a
    process that cannot start here is left to ``run_probe`` to start and report."""
    interpreter = interpreter_path(python)
    key = (interpreter, do_import, guard)
    if key in _started or (not do_import and is_this_interpreter(interpreter)):
        return
    try:
        _started[key] = _spawn_probe(interpreter, do_import, guard)
    except OSError:
        return


def run_probe(package: str, python: str | None = None, do_import: bool = False,
              guard: str | None = None) -> dict[str, Any]:
    """Run probe.py in the target interpreter (stdlib only there) and return its facts. When the target is
    the interpreter running hotfix (a baked image, `python -m vllm_hotfix` in the server's venv), the probe
    runs in this process (same code, same sys.path minus the launcher's entry): no second interpreter.
    ``guard``: also whether vLLM would load the guard there (probe.guard_facts): its entry points
    (``probe.GUARD_ENTRY_POINTS``), and loaded (``GUARD_LOAD``; in this process always: no extra cost)."""
    interpreter = interpreter_path(python)
    if not do_import and is_this_interpreter(interpreter):
        return probe_module.probe_here(package, guard=probe_module.GUARD_LOAD if guard else None)
    import subprocess

    try:
        process = _started.pop((interpreter, do_import, guard), None) or _spawn_probe(interpreter, do_import, guard)
    except (OSError, ValueError) as exc:
        raise cannot_start(interpreter, exc) from None
    try:
        with process:
            try:
                stdout, stderr = process.communicate(package + "\n", timeout=PROBE_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                raise Refused(f"probing {package} with {interpreter} took over {PROBE_TIMEOUT:.0f}s"
                              + (" (the real import hangs?)" if do_import else "")) from None
    except OSError as exc:  # handing the name to the probe, reading its answer: a pipe write or read
        raise WriteFailed(f"--python {interpreter}: cannot talk to the probe process ({exc.strerror or exc}); nothing was changed") from None
    facts = probe_module.read_facts(stdout)
    if facts is not None:
        return facts
    last = (stderr.strip().splitlines() or ["no output"])[-1]
    raise UsageError(f"--python {interpreter} could not run the probe (exit {process.returncode}): {last}",
                     hint="it must be a Python 3.10-3.13 interpreter")


def cannot_start(interpreter: str, exc: Exception) -> UsageError:
    """Why ``interpreter`` could not be started, as a usage error (exit 2): it is what --python named."""
    hint = "give the path of the python that runs vLLM, e.g. /opt/venv/bin/python"
    if isinstance(exc, FileNotFoundError):
        return UsageError(f"--python {interpreter}: no such interpreter", hint=hint)
    if os.path.isdir(interpreter):
        return UsageError(f"--python {interpreter}: is a directory, not an interpreter (nor a venv with "
                          f"bin/python)", hint=hint)
    if isinstance(exc, PermissionError):
        try:
            os.stat(interpreter)
        except PermissionError:  # a folder on the way this user may not search: it cannot even be looked at
            return UsageError(f"--python {interpreter}: this user (uid {os.geteuid()}) cannot reach it (permission "
                              f"denied on the way)", hint="run hotfix as a user who can run that interpreter (the "
                                                          "one vLLM runs as), or give that user access")
        except OSError:
            pass
        return UsageError(f"--python {interpreter}: not executable", hint=hint)
    if isinstance(exc, OSError) and exc.errno == errno.ENOEXEC:
        return UsageError(f"--python {interpreter}: not a program this system can run (Exec format error)",
                          hint=hint)
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return UsageError(f"--python {interpreter}: cannot be started ({why})", hint=hint)


_under = install_facts.under


def _path_source(entry: str, facts: dict[str, Any]) -> str:
    """Why ``entry`` is on sys.path, for warnings."""
    if entry in facts["pythonpath"] or os.path.abspath(entry) in map(os.path.abspath, facts["pythonpath"]):
        return f"PYTHONPATH entry {entry}"
    for pth in facts["pth_files"]:
        if os.path.normpath(entry) in pth["adds"]:
            return f"{entry} (added by {pth['file']})"
        if any(entry in line for line in pth["code"]):
            return f"{entry} (put on sys.path by code in {pth['file']})"
    if entry in facts["site_dirs"]:
        return f"site-packages {entry}"
    return f"sys.path entry {entry}"


def _git_info(root: Path, warnings: list[str]) -> GitInfo | None:
    from vllm_hotfix.install import git as gitmod

    try:
        return gitmod.info(root)
    except Refused as exc:
        warnings.append(exc.message)
        return None


def target_from_facts(facts: dict[str, Any]) -> Target:
    """Turn probe facts into a Target; pure apart from git and file-existence checks."""
    package = facts["package"]
    try:
        decided = install_facts.decide(facts)  # the one rule for kind, root, distribution (the guard's too)
    except install_facts.NotImportable as exc:
        raise Refused(
            str(exc),
            hint="pass --python with the interpreter that runs vLLM (e.g. /opt/venv/bin/python) or set HOTFIX_PYTHON; "
            "for a source checkout pass --root DIR (e.g. /vllm-workspace/vllm-ascend)",
        ) from None
    package_dir, origin, dist, dist_info = decided.package_dir, decided.origin, decided.dist, decided.dist_info
    kind, root = decided.kind, decided.root
    warnings: list[str] = []
    if origin is None:
        warnings.append(f"{package} resolves to a namespace package (no __init__.py) at {package_dir}: "
                        "a directory of that name on sys.path may be shadowing the real package")
    if kind == install_facts.WHEEL and not dist["record_lists_init"] and origin is not None:
        warnings.append(f"{dist_info}/RECORD does not list {package}/{origin.name}: the loaded files are not the ones pip installed")

    git_info = None
    if kind in ("editable", "git") and install_facts.find_work_tree(root) is not None:
        git_info = _git_info(root, warnings)
    # a checkout: what its build would produce, as --root says; a wheel: its metadata (the guard's rule too)
    version, version_from, version_file, _ = install_facts.release_version(decided, package)

    copies = [c for c in facts["copies"]]
    loaded = next((c for c in copies if _under(Path(c["path"]), package_dir) or Path(c["path"]).resolve() == package_dir.resolve()), None)
    installed_dir = dist_info.parent / package if dist_info is not None else None
    if dist is not None and installed_dir is not None and installed_dir.is_dir() and not _under(package_dir, installed_dir) and kind != "editable":
        source = _path_source(loaded["entry"], facts) if loaded else f"{package_dir}"
        warnings.append(
            f"{package} is loaded from {package_dir} ({source}), which shadows the installed "
            f"{dist['name']} {dist['version']} at {installed_dir}: edits to either copy affect only that copy"
        )
    if len(copies) > 1:
        others = ", ".join(c["path"] for c in copies if c is not loaded)
        warnings.append(f"{len(copies)} copies of {package} on sys.path: loaded {package_dir}; also {others}")

    imported = facts.get("import")
    import_file = import_error = None
    if imported:
        import_file, import_error = imported.get("file"), imported.get("error")
        if not import_error and import_file and origin is not None and Path(import_file).resolve() != origin.resolve():
            warnings.append(
                f"MISMATCH: `import {package}` loads {import_file} but find_spec resolves {origin}: "
                "something at import time (sitecustomize, a .pth import line, a plugin) changes sys.path"
            )

    return Target(
        package=package,
        distribution=install_facts.distribution_of(decided),
        version=version,
        kind=kind,
        package_dir=package_dir,
        root=root,
        dist_info=dist_info,
        python=facts["python"],
        git=git_info,
        warnings=tuple(warnings),
        origin=origin,
        import_file=import_file,
        import_error=import_error,
        python_version=facts.get("python_version"),
        copies=tuple(Path(c["path"]) for c in ([loaded] if loaded else []) + [c for c in copies if c is not loaded]),
        sys_path=tuple(facts["sys_path"]),
        version_from=version_from,
        version_file=version_file,
        guard=_guard_facts(facts.get("guard")),
        commit=install_facts.checkout_commit(decided),
    )


def _guard_facts(found: Any) -> GuardFacts | None:
    if not isinstance(found, dict):
        return None
    entry_points = found.get("entry_points")
    error = found.get("load_error")
    return GuardFacts(tuple(str(e) for e in entry_points) if isinstance(entry_points, list) else (),
                      str(error) if error is not None else None, found.get("loaded") is True)


def locate_package(package: str, python: str | None = None, do_import: bool = False,
                   guard: str | None = None) -> Target:
    """The Target ``import PACKAGE`` resolves to in ``python`` (default: this interpreter)."""
    return target_from_facts(run_probe(package, python, do_import, guard))


def locate_root(root: Path, package: str | None = None) -> Target:
    """A source checkout given by --root: kind 'git' in a git work tree, else 'directory'."""
    from vllm_hotfix.install import git as gitmod

    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"--root {root}: no such directory")
    root = root.resolve()
    if package is None:
        package = checkout_package(root)
    package_dir = root / package if package else root
    distribution = version = None
    dist_info = None
    if package:
        dist_info, distribution, version = _checkout_metadata(root, package)
    version, version_from, version_file, project = install_facts.checkout_release(
        root, package, version, str(_metadata_file(dist_info)) if dist_info else None)
    if distribution is None and package:
        distribution = project  # pyproject.toml's [project] name
    warnings: list[str] = []
    top = gitmod.find_work_tree(root)
    git_info = _git_info(root, warnings) if top is not None else None
    return Target(
        package=package or root.name,
        distribution=distribution,
        version=version,
        kind="git" if top is not None else "directory",
        package_dir=package_dir,
        root=root,
        dist_info=dist_info,
        python=None,
        git=git_info,
        warnings=tuple(warnings),
        origin=package_dir / "__init__.py" if (package_dir / "__init__.py").exists() else None,
        version_from=version_from,
        version_file=version_file,
        commit=install_facts.read_head(root) if top is not None else None,
    )


def checkout_package(root: Path) -> str | None:
    """The package a checkout given without one is about: its only top-level package, else the one its
    pyproject [project] name is (install_facts.distribution_of's rule: a vLLM checkout has tests/ and
    benchmarks/ beside vllm/), never the checkout folder's name. None: no way to tell."""
    from vllm_hotfix_guard.core.distname import canonical_name
    from vllm_hotfix_guard.install.version import project_name

    candidates = sorted(p.parent.name for p in root.glob("*/__init__.py"))
    if len(candidates) == 1:
        return candidates[0]
    project = project_name(root)
    named = canonical_name(project).replace("-", "_") if project else None
    return named if named in candidates else None


def _metadata_file(meta_dir: Path) -> Path:
    return meta_dir / ("PKG-INFO" if meta_dir.suffix == ".egg-info" else "METADATA")


def _checkout_metadata(root: Path, package: str) -> tuple[Path | None, str | None, str | None]:
    """Name and version from a *.dist-info / *.egg-info left in the checkout by an editable install."""
    for pattern in ("*.egg-info", "*.dist-info", "src/*.egg-info"):
        for meta_dir in sorted(root.glob(pattern)):
            meta = _metadata_file(meta_dir)
            top_level = meta_dir / "top_level.txt"
            if top_level.is_file() and package not in top_level.read_text(encoding="utf-8").split():
                continue
            if meta.is_file():
                headers = probe_module.metadata_headers(meta.read_text(encoding="utf-8", errors="replace"))
                return meta_dir, headers.get("Name"), headers.get("Version")
    return None, None, None
