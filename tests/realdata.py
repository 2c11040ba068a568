"""Real-data layer for tests and benchmarks: real vLLM wheels and vllm-ascend releases from the index, cached
outside the repo.

Wheels are downloaded once into ``$HOTFIX_TEST_CACHE`` (default ``~/.cache/vllm-hotfix``) and
installed with a real ``pip install --no-deps --no-compile`` into cached template venvs. Tests get
a private *copy* of a template, so nothing a test does can reach the template or the user's files.
"""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import subprocess
import sys
import sysconfig
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("HOTFIX_TEST_CACHE", Path.home() / ".cache" / "vllm-hotfix"))
WHEELS = CACHE / "wheels"
VENVS = CACHE / "venvs"

# Set by tests/tiers.py while pytest runs: called with (tier, what) on every use of an entry point below,
# it fails a test that does not declare that tier. Outside pytest (benchmarks, .ci/run) it stays None.
tier_check = None


def needs(tier: str):
    """Decorator: every call of the function, cached or not, is a use of ``tier`` by the running test."""
    def wrap(func):
        @functools.wraps(func)
        def checked(*args, **kwargs):
            if tier_check is not None:
                tier_check(tier, f"realdata.{func.__name__}")
            return func(*args, **kwargs)
        return checked
    return wrap


@contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@needs("real")
def vllm_wheel(version: str) -> Path:
    """Path of the real ``vllm-VERSION`` wheel, downloading it from PyPI on first use."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    with _file_lock(WHEELS / f".{version}.lock"):
        found = sorted(WHEELS.glob(f"vllm-{version}-*.whl"))
        if found:
            return found[0]
        tmp = WHEELS / f".download-{version}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--no-cache-dir",
             "--disable-pip-version-check", "-q", f"vllm=={version}", "-d", str(tmp)],
            check=True,
        )
        (wheel,) = tmp.glob("vllm-*.whl")
        final = WHEELS / wheel.name
        os.replace(wheel, final)
        shutil.rmtree(tmp, ignore_errors=True)
        return final


@dataclass(frozen=True)
class Venv:
    root: Path
    python: Path
    site_packages: Path
    package: str = "vllm"

    @property
    def package_dir(self) -> Path:
        return self.site_packages / self.package


def _site_packages(root: Path, python_version: str) -> Path:
    return root / "lib" / f"python{python_version}" / "site-packages"


def make_venv(root: Path, base_python: str = sys.executable) -> Venv:
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(root)], check=True)
    ver = subprocess.run(
        [str(root / "bin" / "python"), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    return Venv(root, root / "bin" / "python", _site_packages(root, ver))


def pip_install(venv: Venv, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv.python), "install", "--no-deps",
         "--no-compile", "--disable-pip-version-check", "-q", *args],
        check=True,
    )


@needs("real")
def vllm_template(version: str) -> Venv:
    """A cached venv with the real vLLM VERSION wheel installed. Never modify it: copy it."""
    pyver = "%d.%d" % sys.version_info[:2]
    root = VENVS / f"vllm-{version}-py{pyver}"
    with _file_lock(VENVS / f".{version}-py{pyver}.lock"):
        if (root / ".complete").exists() and (root / _SHARED_LIST).exists():
            return Venv(root, root / "bin" / "python", _site_packages(root, pyver))
        shutil.rmtree(root, ignore_errors=True)
        venv = make_venv(root)
        pip_install(venv, str(vllm_wheel(version)))
        _write_shared_list(root)
        (root / ".complete").write_text("ok\n")
        return venv


# PyPI's torch build. `===`: exactly "2.13.0", never a local "+cpu" build that a --find-links folder
# may offer (a CPU-only torch from another index breaks torchvision, and with it vLLM's CLI).
FULL_REQUIREMENTS = ("vllm=={version}", "torch===2.13.0")


@needs("vllm_full")
def vllm_full_venv(version: str = "0.30.0") -> Venv:
    """A cached venv with the real ``vllm==VERSION`` *and all its dependencies* (torch included) from
    PyPI, so vLLM's own code runs: ``load_general_plugins()``, ``vllm --version``, its multiprocessing.

    ~1.4 GB download (+2.7 GB torch), ~8 GB on disk (2026-12-02), minutes the first time; then reused. Never modify
    it: tests put vllm-hotfix and patched files in front of it with ``PYTHONPATH`` overlays.
    """
    pyver = "%d.%d" % sys.version_info[:2]
    root = VENVS / f"vllm-full-{version}-py{pyver}"
    requirements = [r.format(version=version) for r in FULL_REQUIREMENTS]
    marker = " ".join(requirements) + "\n"
    with _file_lock(VENVS / f".full-{version}-py{pyver}.lock"):
        venv = Venv(root, root / "bin" / "python", _site_packages(root, pyver))
        done = root / ".complete"
        if done.exists() and done.read_text() == marker:
            return venv
        if not venv.python.exists():
            shutil.rmtree(root, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
        done.unlink(missing_ok=True)
        subprocess.run([str(venv.python), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                        "--no-compile", *requirements], check=True)
        done.write_text(marker)
        return venv


# Compiled extensions are ~90 % of an install's 770 MB and no test or hotfix ever writes one, so a
# copy shares them as hard links: each private copy then costs ~90 MB of disk instead of 770 MB.
# (hotfix itself never writes in place: it writes a temp file and renames it over the original.)
_SHARED_MIN_SIZE = 1 << 20
_SHARED_LIST = ".shared-binaries"


def _is_shared(path: Path, size: int) -> bool:
    return size >= _SHARED_MIN_SIZE and path.suffix != ".py"


def _write_shared_list(root: Path) -> None:
    lines = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            st = path.stat()
            if _is_shared(path, st.st_size):
                lines.append(f"{st.st_size} {st.st_mtime_ns} {path.relative_to(root)}\n")
    (root / _SHARED_LIST).write_text("".join(lines))


def _shared_files(root: Path) -> set[str]:
    """The template's hard-linkable binaries, after checking no test has written into one."""
    shared = set()
    for line in (root / _SHARED_LIST).read_text().splitlines():
        size, mtime_ns, rel = line.split(" ", 2)
        st = (root / rel).stat()
        if (st.st_size, st.st_mtime_ns) != (int(size), int(mtime_ns)):
            raise AssertionError(f"a test wrote into the shared template file {root / rel}; "
                                 f"delete {root} to rebuild it")
        shared.add(rel)
    return shared


def copy_venv(template: Venv, dest: Path) -> Venv:
    """A private copy of a template venv: real copies of everything a test may change (all
    sources, RECORD, metadata); large compiled binaries shared as hard links (read only)."""
    shared = _shared_files(template.root)

    def copy(src: str, dst: str) -> str:
        if os.path.relpath(src, template.root) in shared:
            try:
                os.link(src, dst)
                return dst
            except OSError:
                pass  # another file system (e.g. /tmp on tmpfs): copy it
        return shutil.copy2(src, dst)

    shutil.copytree(template.root, dest, symlinks=True, copy_function=copy,
                    ignore=shutil.ignore_patterns(".complete", _SHARED_LIST))
    rel = template.site_packages.relative_to(template.root)
    return Venv(dest, dest / "bin" / "python", dest / rel, template.package)


def python_sources(site_packages: Path, dest: Path) -> Path:
    """Copy the ``vllm/`` Python sources (no .so) of an install into ``dest/vllm``."""
    src = site_packages / "vllm"
    shutil.copytree(src, dest / "vllm", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    return dest


def this_site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


SOURCES = CACHE / "sources"
DIFFS = CACHE / "diffs"


def _is_source_member(name: str) -> bool:
    return name.startswith("vllm/") and not name.endswith((".so", "/")) and "__pycache__" not in name


_ELF_MAGIC = b"\x7fELF"


@needs("real")
def vllm_source_tree(version: str) -> Path:
    """Cached ``<dir>/vllm`` sources unzipped from the real wheel. Read only!

    Compiled code is left out: ``*.so`` and ELF executables (the wheels ship a 57 MB ``vllm/vllm-rs``
    that would turn the source diff into a binary diff), and ``__pycache__``.

    Returns ``<dir>``, the directory that contains ``vllm/`` (what ``-p1`` paths are relative to).
    """
    import zipfile

    root = SOURCES / f"vllm-{version}"
    with _file_lock(SOURCES / f".{version}.lock"):
        if (root / ".complete").exists():
            return root
        tmp = SOURCES / f".extract-{version}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
        with zipfile.ZipFile(vllm_wheel(version)) as wheel:
            for info in wheel.infolist():
                if not _is_source_member(info.filename):
                    continue
                with wheel.open(info) as member:
                    if member.read(len(_ELF_MAGIC)) == _ELF_MAGIC:
                        continue
                path = Path(wheel.extract(info, tmp))
                if (info.external_attr >> 16) & 0o111:
                    path.chmod(0o755)
        (tmp / ".complete").write_text("ok\n")
        os.replace(tmp, root)
        return root


@needs("real")
def vllm_source_diff(old: str = "0.29.0", new: str = "0.30.0") -> Path:
    """Cached ``diff -ruN`` of two real wheels' ``vllm/`` sources, paths ``a/vllm/...`` / ``b/vllm/...``."""
    old_tree, new_tree = vllm_source_tree(old), vllm_source_tree(new)
    final = DIFFS / f"vllm-{old}-{new}.diff"
    with _file_lock(DIFFS / f".{old}-{new}.lock"):
        if final.exists():
            return final
        work = DIFFS / f".build-{old}-{new}-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        (work / "a").symlink_to(old_tree)
        (work / "b").symlink_to(new_tree)
        with open(work / "out.diff", "wb") as out:
            done = subprocess.run(["diff", "-ruN", "a/vllm", "b/vllm"], cwd=work, stdout=out)
        if done.returncode not in (0, 1):
            raise RuntimeError(f"diff -ruN failed with exit code {done.returncode}")
        os.replace(work / "out.diff", final)
        shutil.rmtree(work, ignore_errors=True)
        return final


def build_project_wheel(dest: Path) -> Path:
    """Build vllm-hotfix's own wheel from a clean copy of the work tree (what `pip install .` would install)."""
    repo = Path(__file__).resolve().parent.parent
    source = dest / "project"
    for tree in ("src", "manifests", "patches"):
        shutil.copytree(repo / tree, source / tree, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(repo / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
                    str(source), "-w", str(dest / "dist")], check=True)
    (wheel,) = (dest / "dist").glob("vllm_hotfix-*.whl")
    return wheel


def find_python(version: str) -> str | None:
    """A working ``pythonX.Y`` (pyenv shims refuse versions that are not selected, so look behind them)."""
    import glob

    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))
    for candidate in candidates:
        if candidate and subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return None


# --- vllm-ascend: sdists, checkouts made from them, installs -------------------------------------
# The index publishes vllm-ascend 0.27.1rc1 ... 0.30.0rc2 as sdists only, and `pip download` cannot fetch
# them (it builds, which needs CANN): the file comes from the index's JSON API. 0.23.0 / 0.26.0rc1 also
# publish x86_64 wheels, installed with --no-deps (no torch_npu: nothing may import vllm_ascend).

ASCEND = "vllm-ascend"
SDISTS = CACHE / "sdists"
CHECKOUTS = CACHE / "checkouts"
BUILT = CACHE / "built-wheels"  # wheels built here from a real sdist (not the index's files)
# vllm-ascend's setup.py without CANN: no custom kernels, a chip name instead of asking npu-smi.
ASCEND_BUILD_ENV = {"COMPILE_CUSTOM_KERNELS": "0", "SOC_VERSION": "ascend910_9391"}


def _json_api(project: str) -> tuple[str, dict]:
    """The index's JSON API page of ``project`` on the host pip uses, and its parsed body."""
    import json
    from urllib.parse import urlsplit, urlunsplit

    import requests

    from vllm_hotfix.catalog.wheelindex import index_config

    config = index_config()
    base = urlsplit(config.urls[0])
    url = urlunsplit((base.scheme, base.netloc, f"/pypi/{project}/json", "", ""))
    response = requests.get(url, timeout=120, verify=config.cert or True)
    response.raise_for_status()
    return url, json.loads(response.content)


@needs("real")
def ascend_sdist(version: str) -> Path:
    """The real ``vllm_ascend-VERSION.tar.gz`` from the index (its JSON API), sha256-checked, cached."""
    import hashlib
    from urllib.parse import urljoin

    import requests

    final = SDISTS / f"vllm_ascend-{version}.tar.gz"
    with _file_lock(SDISTS / f".{version}.lock"):
        if final.exists():
            return final
        page, body = _json_api(ASCEND)
        (entry,) = [f for f in body["releases"][version] if f["packagetype"] == "sdist"]
        tmp = SDISTS / f".download-{version}-{os.getpid()}"
        digest = hashlib.sha256()
        with requests.get(urljoin(page, entry["url"]), stream=True, timeout=300) as response, open(tmp, "wb") as out:
            response.raise_for_status()
            for chunk in response.iter_content(1 << 20):
                out.write(chunk)
                digest.update(chunk)
        if digest.hexdigest() != entry["digests"]["sha256"]:
            tmp.unlink()
            raise RuntimeError(f"{entry['filename']}: sha256 does not match the index's")
        os.replace(tmp, final)
        return final


@needs("real")
def ascend_source(version: str) -> Path:
    """The sdist unpacked (``tar --no-same-owner``): the directory holding ``vllm_ascend/``. Read only!"""
    root = SOURCES / f"vllm-ascend-{version}"
    with _file_lock(SOURCES / f".ascend-{version}.lock"):
        if (root / ".complete").exists():
            return root / f"vllm_ascend-{version}"
        tmp = SOURCES / f".extract-ascend-{version}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
        tmp.mkdir(parents=True)
        subprocess.run(["tar", "--no-same-owner", "-xzf", str(ascend_sdist(version)), "-C", str(tmp)], check=True)
        (tmp / ".complete").write_text("ok\n")
        os.replace(tmp, root)
        return root / f"vllm_ascend-{version}"


def release_branch(version: str) -> str:
    """vllm-ascend's release branch of a version: 0.30.0rc2 -> releases/v0.30.0."""
    from packaging.version import Version

    return "releases/v" + Version(version).base_version


def _git_env() -> dict[str, str]:
    return {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "vllm-ascend", "GIT_AUTHOR_EMAIL": "release@vllm-ascend.invalid",
            "GIT_COMMITTER_NAME": "vllm-ascend", "GIT_COMMITTER_EMAIL": "release@vllm-ascend.invalid",
            "GIT_AUTHOR_DATE": "2026-11-20T00:00:00+08:00", "GIT_COMMITTER_DATE": "2026-11-20T00:00:00+08:00"}


def _ascend_checkout_template(version: str) -> Path:
    root = CHECKOUTS / f"vllm-ascend-{version}"
    with _file_lock(CHECKOUTS / f".ascend-{version}.lock"):
        if (root / ".git" / "hotfix-complete").exists():
            return root
        tmp = CHECKOUTS / f".make-ascend-{version}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(ascend_source(version), tmp, symlinks=True)
        env = _git_env()
        for args in (["init", "-q", "-b", release_branch(version)], ["add", "-A"],
                     ["commit", "-q", "-m", f"vllm-ascend {version} (the published sdist)"],
                     ["tag", "-a", f"v{version}", "-m", f"vllm-ascend v{version}"]):
            subprocess.run(["git", *args], cwd=tmp, env=env, check=True)
        (tmp / ".git" / "hotfix-complete").write_text("ok\n")
        os.replace(tmp, root)
        return root


@needs("real")
def ascend_checkout(version: str, dest: Path) -> Path:
    """A private git checkout of the real sdist: ``git init`` on branch releases/vX.Y.Z, one commit,
    tag ``vVERSION`` (annotated), clean (the sdist's generated files are .gitignored upstream)."""
    template = _ascend_checkout_template(version)
    shutil.copytree(template, dest, symlinks=True, ignore=shutil.ignore_patterns("hotfix-complete"))
    return dest


@needs("real")
def ascend_editable(version: str, dest: Path) -> tuple[Path, Venv]:
    """The image's layout (/vllm-workspace/vllm-ascend): a checkout of the sdist at its tag, installed with
    the real ``pip install -e`` (vllm-ascend's own setup.py, no custom kernels) into a fresh venv.
    Returns (checkout, venv). ~6 s."""
    checkout = ascend_checkout(version, dest / "vllm-ascend")
    venv = make_venv(dest / "venv")
    tools = _build_tools()
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv.python), "install", "--no-deps", "--no-compile",
                    "--no-build-isolation", "--disable-pip-version-check", "-q", "-e", str(checkout)],
                   env={**os.environ, **ASCEND_BUILD_ENV, "PYTHONPATH": str(tools)}, check=True)
    return checkout, Venv(venv.root, venv.python, venv.site_packages, "vllm_ascend")


def _build_tools() -> Path:
    """setuptools + setuptools-scm for vllm-ascend's setup.py, outside any test venv (cached)."""
    root = VENVS / "ascend-build-tools"
    with _file_lock(VENVS / ".ascend-build-tools.lock"):
        if not (root / ".complete").exists():
            shutil.rmtree(root, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q",
                            "--target", str(root), "setuptools>=64", "setuptools-scm>=8", "wheel"], check=True)
            (root / ".complete").write_text("ok\n")
    return root


@needs("real")
def ascend_wheel(version: str) -> Path:
    """The wheel of vllm-ascend VERSION: the index's x86_64 one where published (0.23.0, 0.26.0rc1, ...),
    else built from the real sdist by its own setup.py without CANN (no compiled ops, every .py file).
    A built wheel is kept in ``BUILT``, never beside the index's files (hotfix's own cache is ``WHEELS`` too:
    it must only ever find what the index published there)."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    BUILT.mkdir(parents=True, exist_ok=True)
    with _file_lock(WHEELS / f".ascend-{version}.lock"):
        found = sorted(WHEELS.glob(f"vllm_ascend-{version}-*.whl")) + sorted(BUILT.glob(f"vllm_ascend-{version}-*.whl"))
        if found:
            return found[0]
        tmp = WHEELS / f".download-ascend-{version}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        got = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--no-cache-dir",
             "--disable-pip-version-check", "-q", f"vllm-ascend=={version}", "-d", str(tmp)], capture_output=True)
        if got.returncode != 0:  # an sdist-only release: build the pure-Python wheel from the real sources
            build = tmp / "src"
            shutil.copytree(ascend_source(version), build, symlinks=True)
            subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                            "--disable-pip-version-check", "-q", str(build), "-w", str(tmp)],
                           env={**os.environ, **ASCEND_BUILD_ENV, "PYTHONPATH": str(_build_tools())}, check=True)
        (wheel,) = tmp.glob("vllm_ascend-*.whl")
        final = (WHEELS if got.returncode == 0 else BUILT) / wheel.name
        os.replace(wheel, final)
        shutil.rmtree(tmp, ignore_errors=True)
        return final


@needs("real")
def ascend_template(version: str) -> Venv:
    """A cached venv with vllm-ascend VERSION installed by pip --no-deps (see ``ascend_wheel``). Copy it."""
    pyver = "%d.%d" % sys.version_info[:2]
    root = VENVS / f"vllm-ascend-{version}-py{pyver}"
    with _file_lock(VENVS / f".ascend-{version}-py{pyver}.lock"):
        if not ((root / ".complete").exists() and (root / _SHARED_LIST).exists()):
            shutil.rmtree(root, ignore_errors=True)
            venv = make_venv(root)
            pip_install(venv, str(ascend_wheel(version)))
            _write_shared_list(root)
            (root / ".complete").write_text("ok\n")
        return Venv(root, root / "bin" / "python", _site_packages(root, pyver), "vllm_ascend")
