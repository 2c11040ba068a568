"""Releases published only as an sdist (most of vllm-ascend's), and releases read from a clone's tags: the
index lists them, check-catalog / contains / port read them as they read wheels. Real http on 127.0.0.1,
real tar files, real git (the real vllm-ascend artifacts: tests/test_ascend_catalog_real.py)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from fixtures.gitrepo import git, init_repo, write_files
from fixtures.localindex import (TINY_ORIGINAL, TINY_PATCHED, build_wheel, isolated_pip_env, serve, tiny_catalog,
                                 write_simple_index)
from vllm_hotfix.catalog.sources import GitTagReader, SdistReader, release_tags
from vllm_hotfix.catalog.wheelindex import Index, LineProgress, index_config
from vllm_hotfix_guard.errors import InvalidInput

FIXED = b"def f():\n    return 2\n"


def build_sdist(dest: Path, name: str, version: str, files: dict[str, bytes], extra=()) -> Path:
    """``NAME-VERSION.tar.gz`` with one top folder, as setuptools writes it (``extra``: raw TarInfo members)."""
    dest.mkdir(parents=True, exist_ok=True)
    top = f"{name.replace('-', '_')}-{version}"
    path = dest / f"{top}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for rel, data in {"PKG-INFO": f"Name: {name}\nVersion: {version}\n".encode(), **files}.items():
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            info.name = f"{top}/{info.name}"
            tar.addfile(info)
    return path


@pytest.fixture
def index(tmp_path):
    """tinypkg 1.0.0 as a wheel and an sdist; 1.1.0rc1 and 1.2.0 as sdists only."""
    files = [build_wheel(tmp_path / "build", "tinypkg", "1.0.0", {TINY_PATCHED: TINY_ORIGINAL}),
             build_sdist(tmp_path / "build", "tinypkg", "1.0.0", {TINY_PATCHED: TINY_ORIGINAL}),
             build_sdist(tmp_path / "build", "tinypkg", "1.1.0rc1", {TINY_PATCHED: TINY_ORIGINAL}),
             build_sdist(tmp_path / "build", "tinypkg", "1.2.0", {TINY_PATCHED: FIXED})]
    write_simple_index(tmp_path / "www", "tinypkg", files)
    server = serve(tmp_path / "www")
    yield server
    server.stop()


def test_the_index_lists_sdist_only_releases_and_downloads_the_wheel_first(index, tmp_path):
    client = Index(index_config(isolated_pip_env(tmp_path, index.url)))
    assert client.releases("tinypkg") == ["1.0.0", "1.1.0rc1", "1.2.0"]
    quiet = {"progress": lambda n, s: LineProgress(n, s, stream=io.StringIO())}
    assert client.download("tinypkg", "1.0.0", tmp_path / "cache", **quiet).name.endswith(".whl")
    sdist = client.download("tinypkg", "1.2.0", tmp_path / "cache", **quiet)
    assert sdist.name == "tinypkg-1.2.0.tar.gz"
    assert (tmp_path / "cache" / "tinypkg-1.2.0.tar.gz.sha256").read_text().strip() == \
        hashlib.sha256(sdist.read_bytes()).hexdigest()
    with SdistReader(sdist) as read:
        assert read(TINY_PATCHED).data == FIXED and read("PKG-INFO") is not None and read("nothing.py") is None


def test_check_catalog_reads_sdists_and_names_pre_releases_by_pep_440(index, tmp_path, run_hotfix):
    catalog = tiny_catalog(tmp_path / "catalog")  # tiny-fix: tinypkg >=1.0 (names no pre-release)
    env = isolated_pip_env(tmp_path, index.url)
    done = run_hotfix("check-catalog", "--catalog", catalog, "--json", env=env)
    assert done.returncode == 1, done.stderr  # 1.2.0 already holds the change: contained, and no fixed_in says so
    cells = {c["release"]: c["state"] for c in json.loads(done.stdout)["cells"] if c["hotfix"].startswith("tiny-fix")}
    assert cells == {"1.0.0": "applies", "1.2.0": "fails"}
    asked = run_hotfix("check-catalog", "--catalog", catalog, "--versions", ">=1.1.0rc1,<1.2", "--json", env=env)
    assert [(c["release"], c["state"]) for c in json.loads(asked.stdout)["cells"]
            if c["hotfix"].startswith("tiny-fix")] == [("1.1.0rc1", "applies")]
    contains = run_hotfix("contains", "tiny-fix", "--catalog", catalog, "--versions", "1.2.0", "--json", env=env)
    assert [r["state"] for r in json.loads(contains.stdout)["releases"]] == ["contained"], contains.stdout


def test_an_sdist_member_that_is_not_a_regular_file_is_not_a_file_of_the_release(tmp_path):
    link = tarfile.TarInfo("tinypkg/link.py")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    up = tarfile.TarInfo("../escape.py")
    sdist = build_sdist(tmp_path, "tinypkg", "1.0.0", {TINY_PATCHED: TINY_ORIGINAL}, extra=[link, up])
    with SdistReader(sdist) as read:
        assert read("tinypkg/link.py") is None and read("../escape.py") is None and read("escape.py") is None
    (tmp_path / "two.tar.gz").write_bytes(b"")
    with pytest.raises(Exception):
        SdistReader(tmp_path / "two.tar.gz")


def test_two_top_folders_are_not_an_sdist(tmp_path):
    path = tmp_path / "bad.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name in ("a/x.py", "b/y.py"):
            info = tarfile.TarInfo(name)
            tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(InvalidInput, match="one top folder"):
        SdistReader(path)


@pytest.fixture
def clone(tmp_path) -> Path:
    """A clone with tags v1.0.0 and v1.2.0 (the fix) and a tag that names no release."""
    repo = tmp_path / "tinypkg"
    init_repo(repo, {TINY_PATCHED: TINY_ORIGINAL.decode()}, branch="main", message="1.0.0")
    git(repo, "tag", "v1.0.0")
    write_files(repo, {TINY_PATCHED: FIXED.decode()})
    git(repo, "commit", "-qam", "the fix")
    git(repo, "tag", "-a", "v1.2.0", "-m", "1.2.0")
    git(repo, "tag", "nightly")
    return repo


def test_a_clone_s_tags_are_releases(clone):
    assert release_tags(clone) == {"1.0.0": "v1.0.0", "1.2.0": "v1.2.0"}
    with GitTagReader(clone, "v1.0.0") as read:
        assert read(TINY_PATCHED).data == TINY_ORIGINAL and read("absent.py") is None and read("tinypkg") is None


def test_check_catalog_and_contains_over_a_clone_s_tags(clone, tmp_path, run_hotfix):
    catalog = tiny_catalog(tmp_path / "catalog")
    env = isolated_pip_env(tmp_path, "http://127.0.0.1:9/simple/")  # the index is never asked
    done = run_hotfix("check-catalog", "--catalog", catalog, "--repo", clone, "--json", env=env)
    cells = {c["release"]: c["state"] for c in json.loads(done.stdout)["cells"] if c["hotfix"].startswith("tiny-fix")}
    assert cells == {"1.0.0": "applies", "1.2.0": "fails"}, done.stderr
    found = run_hotfix("contains", "tiny-fix", "--catalog", catalog, "--repo", clone, "--versions", "1.2.0", "--json",
                       env=env)
    assert [r["state"] for r in json.loads(found.stdout)["releases"]] == ["contained"], found.stderr
    missing = run_hotfix("check-catalog", "--catalog", catalog, "--repo", clone, "--versions", "1.1.0", env=env)
    assert missing.returncode == 10 and "no tag of release 1.1.0" in missing.stdout
