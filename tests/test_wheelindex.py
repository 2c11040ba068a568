"""Wheels from the index pip is configured with, over real http on 127.0.0.1, without pip."""

from __future__ import annotations

import hashlib
import io
import json

import pytest

from fixtures.localindex import build_wheel, isolated_pip_env, serve, tiny_catalog, write_simple_index
from vllm_hotfix.catalog.wheelindex import Index, LineProgress, index_config
from vllm_hotfix_guard.errors import Unavailable

PATCHED = "tinypkg/mod.py"
ORIGINAL = b"def f():\n    return 1\n"


@pytest.fixture
def index(tmp_path):
    wheels = [build_wheel(tmp_path / "build", "tinypkg", v, {PATCHED: ORIGINAL}, size_pad=300_000)
              for v in ("1.0.0", "1.1.0", "2.0.0rc1")]
    write_simple_index(tmp_path / "www", "tinypkg", wheels)
    server = serve(tmp_path / "www")
    yield server
    server.stop()


def test_pip_configuration_is_read_like_pip(tmp_path):
    env = isolated_pip_env(tmp_path)
    (tmp_path / "xdg" / "pip").mkdir(parents=True)
    (tmp_path / "xdg" / "pip" / "pip.conf").write_text("[global]\nindex-url = https://global.example/simple\n")
    user = tmp_path / "home" / ".config" / "pip"
    user.mkdir(parents=True)
    (user / "pip.conf").write_text("[global]\nindex_url = https://user.example/simple\n"
                                   "extra-index-url =\n    https://a.example/simple\n    https://b.example/simple\n")
    config = index_config(env)
    assert config.urls == ("https://user.example/simple", "https://a.example/simple", "https://b.example/simple")
    env["PIP_INDEX_URL"] = "https://u:secret@mirror.example/simple"
    config = index_config(env)
    assert config.urls[0] == "https://u:secret@mirror.example/simple"
    assert "secret" not in config.describe() and "PIP_INDEX_URL" in config.describe()
    env["PIP_NO_INDEX"] = "1"
    assert index_config(env).urls == ()


def test_default_is_pypi(tmp_path):
    assert index_config(isolated_pip_env(tmp_path)).urls == ("https://pypi.org/simple/",)


def test_releases_and_a_checked_download_from_a_local_index(index, tmp_path):
    client = Index(index_config(isolated_pip_env(tmp_path, index.url)))
    assert client.releases("TinyPkg") == ["1.0.0", "1.1.0", "2.0.0rc1"]  # name normalised; ranges pick (PEP 440)
    out = io.StringIO()
    got = client.download("tinypkg", "1.1.0", tmp_path / "cache",
                          progress=lambda name, size: LineProgress(name, size, stream=out))
    served = index.root / "files" / got.name
    assert got.read_bytes() == served.read_bytes()
    size = served.stat().st_size / 1e6
    assert out.getvalue() == f"hotfix: downloaded {got.name} ({size:.1f} MB)\n"  # into a log: one line, no bar
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [got.name, f"{got.name}.sha256"]  # no temp file
    assert (tmp_path / "cache" / f"{got.name}.sha256").read_text().strip() == hashlib.sha256(served.read_bytes()).hexdigest()


def test_sha256_mismatch_keeps_nothing(tmp_path):
    wheel = build_wheel(tmp_path / "build", "tinypkg", "1.0.0", {PATCHED: ORIGINAL})
    write_simple_index(tmp_path / "www", "tinypkg", [wheel], bad_hash=True)
    server = serve(tmp_path / "www")
    try:
        client = Index(index_config(isolated_pip_env(tmp_path, server.url)))
        with pytest.raises(Unavailable, match="does not match"):
            client.download("tinypkg", "1.0.0", tmp_path / "cache", progress=lambda n, s: LineProgress(n, s, stream=io.StringIO()))
        assert list((tmp_path / "cache").iterdir()) == []
    finally:
        server.stop()


def test_unreachable_index_is_unavailable(tmp_path):
    from fixtures.localindex import free_port

    client = Index(index_config(isolated_pip_env(tmp_path, f"http://127.0.0.1:{free_port()}/simple/")), timeout=5)
    with pytest.raises(Unavailable, match="cannot read the package index"):
        client.releases("tinypkg")


def test_file_index_as_configured_on_this_kind_of_machine(tmp_path):
    wheel = build_wheel(tmp_path / "build", "tinypkg", "1.0.0", {PATCHED: ORIGINAL})
    write_simple_index(tmp_path / "www", "tinypkg", [wheel])
    client = Index(index_config(isolated_pip_env(tmp_path, (tmp_path / "www" / "simple").as_uri())))
    got = client.download("tinypkg", "1.0.0", tmp_path / "cache", progress=lambda n, s: LineProgress(n, s, stream=io.StringIO()))
    assert hashlib.sha256(got.read_bytes()).hexdigest() == hashlib.sha256(wheel.read_bytes()).hexdigest()


def test_check_catalog_lists_and_downloads_through_pip_index_url(index, tmp_path, run_hotfix):
    catalog = tiny_catalog(tmp_path / "catalog")
    env = isolated_pip_env(tmp_path, index.url)
    done = run_hotfix("check-catalog", "--catalog", catalog, "--json", env=env)
    assert done.returncode == 0, done.stderr
    cells = json.loads(done.stdout)["cells"]
    assert [(c["release"], c["state"]) for c in cells if c["hotfix"].startswith("tiny-fix")] == [
        ("1.0.0", "applies"), ("1.1.0", "applies")]
    downloads = [line for line in done.stderr.splitlines() if "tinypkg-" in line and ".whl" in line]
    assert downloads == [f"hotfix: downloaded tinypkg-{v}-py3-none-any.whl ({(index.root / 'files' / f'tinypkg-{v}-py3-none-any.whl').stat().st_size / 1e6:.1f} MB)"
                         for v in ("1.0.0", "1.1.0")], done.stderr  # one summary line per wheel, no progress lines


def test_check_catalog_download_failure_is_unavailable_not_fails(tmp_path, run_hotfix):
    from fixtures.localindex import free_port

    catalog = tiny_catalog(tmp_path / "catalog")
    env = isolated_pip_env(tmp_path, f"http://127.0.0.1:{free_port()}/simple/")
    done = run_hotfix("check-catalog", "tiny-fix", "--catalog", catalog, "--versions", "1.0.0", "--json", env=env)
    assert done.returncode == 10, done.stderr
    (cell,) = json.loads(done.stdout)["cells"]
    assert cell["state"] == "unavailable" and "127.0.0.1" in cell["detail"]
    listing = run_hotfix("check-catalog", "tiny-fix", "--catalog", catalog, env=env)
    assert listing.returncode == 10 and "unavailable" in listing.stdout and "fails" not in listing.stdout
