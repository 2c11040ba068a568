"""Issue 31, caches: a cache folder another user could have written is not used; a cached wheel is checked
against the sha256 the index gave (kept beside it, NAME.whl.sha256) before each use, and a tampered or
truncated one is fetched once more; archive members are capped by declared and by actual size. Real
http index on 127.0.0.1 (fixtures/localindex), real CLI."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile

import pytest

from fixtures.localindex import TINY_ORIGINAL as ORIGINAL, TINY_PATCHED as PATCHED
from fixtures.localindex import build_wheel, isolated_pip_env, serve, tiny_catalog, write_simple_index
from fixtures.trees import snapshot
OTHER_UID = 4242


@pytest.fixture
def index(tmp_path):
    wheels = [build_wheel(tmp_path / "build", "tinypkg", v, {PATCHED: ORIGINAL}) for v in ("1.0.0", "1.1.0")]
    write_simple_index(tmp_path / "www", "tinypkg", wheels)
    server = serve(tmp_path / "www")
    yield server
    server.stop()


def _check(run_hotfix, tmp_path, env):
    done = run_hotfix("check-catalog", "tiny-fix", "--catalog", tiny_catalog(tmp_path / "catalog"), "--versions",
                      "1.0.0", "--json", env=env)
    return done, [(c["release"], c["state"]) for c in json.loads(done.stdout)["cells"]] if done.stdout else None


def test_a_cached_wheel_is_rechecked_and_a_tampered_or_truncated_one_fetched_again(index, tmp_path, run_hotfix):
    env = isolated_pip_env(tmp_path, index.url)
    done, cells = _check(run_hotfix, tmp_path, env)
    assert done.returncode == 0 and cells == [("1.0.0", "applies")], done.stderr
    wheels = tmp_path / "cache" / "wheels"
    wheel = wheels / "tinypkg-1.0.0-py3-none-any.whl"
    original = wheel.read_bytes()
    assert (wheels / f"{wheel.name}.sha256").read_text().strip() == hashlib.sha256(original).hexdigest()
    assert not wheels.stat().st_mode & 0o022 and not wheel.stat().st_mode & 0o022

    # a planted wheel of the same name: its patch would "apply" to other code; it is refetched instead
    planted = build_wheel(tmp_path / "evil", "tinypkg", "1.0.0", {PATCHED: b"def f():\n    return 'owned'\n"})
    wheel.write_bytes(planted.read_bytes())
    done, cells = _check(run_hotfix, tmp_path, env)
    assert done.returncode == 0 and cells == [("1.0.0", "applies")], done.stderr
    assert "is not the index's" in done.stderr and "fetching it once more" in done.stderr
    assert wheel.read_bytes() == original

    wheel.write_bytes(original[: len(original) // 2])  # truncated (a download cut short, a full disk)
    done, cells = _check(run_hotfix, tmp_path, env)
    assert done.returncode == 0 and cells == [("1.0.0", "applies")] and wheel.read_bytes() == original, done.stderr


def test_a_wheel_that_stays_wrong_is_a_clear_error(tmp_path, run_hotfix):
    wheels = [build_wheel(tmp_path / "build", "tinypkg", "1.0.0", {PATCHED: ORIGINAL})]
    write_simple_index(tmp_path / "www", "tinypkg", wheels, bad_hash=True)  # the mirror itself serves other bytes
    server = serve(tmp_path / "www")
    try:
        env = isolated_pip_env(tmp_path, server.url)
        cache = tmp_path / "cache" / "wheels"
        cache.mkdir(parents=True)
        (cache / wheels[0].name).write_bytes(wheels[0].read_bytes())
        done, cells = _check(run_hotfix, tmp_path, env)
    finally:
        server.stop()
    assert done.returncode == 10 and cells == [("1.0.0", "unavailable")], done.stderr
    assert "fetching it once more" in done.stderr
    assert not list(cache.glob("*.whl"))  # nothing wrong is left to be used later


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's cache needs root (os.chown)")
@pytest.mark.parametrize("how", ["owner", "mode"])
def test_a_cache_another_user_could_write_is_not_used(index, tmp_path, run_hotfix, how):
    env = isolated_pip_env(tmp_path, index.url)
    wheels = tmp_path / "cache" / "wheels"
    wheels.mkdir(parents=True)
    planted = build_wheel(tmp_path / "evil", "tinypkg", "1.0.0", {PATCHED: b"def f():\n    return 'owned'\n"})
    (wheels / planted.name).write_bytes(planted.read_bytes())
    (wheels / f"{planted.name}.sha256").write_text(hashlib.sha256(planted.read_bytes()).hexdigest() + "\n")
    if how == "owner":
        os.chown(wheels, OTHER_UID, OTHER_UID)
    else:
        os.chmod(wheels, 0o777)
    before = snapshot(tmp_path / "cache")
    done, cells = _check(run_hotfix, tmp_path, env)
    assert done.returncode == 0 and cells == [("1.0.0", "applies")], done.stderr
    assert "not used as a cache" in done.stderr
    assert snapshot(tmp_path / "cache") == before  # neither read as a wheel nor written


def _bomb(path, declared_ok: bool):
    """A small wheel whose tinypkg/mod.py is 80 MiB of zeros (over the 64 MiB cap) -- declared as such, or
    declaring 22 bytes while inflating to more (its local header and directory lie)."""
    built = build_wheel(path.parent, "tinypkg", "1.0.0", {PATCHED: ORIGINAL})
    built.rename(path)
    with zipfile.ZipFile(path) as zf:
        members = [(i, zf.read(i)) for i in zf.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for info, data in members:
            zf.writestr(info, b"\0" * (80 << 20) if info.filename == PATCHED else data)
    if not declared_ok:
        raw = bytearray(path.read_bytes())
        size = (80 << 20).to_bytes(4, "little")
        raw = raw.replace(size, len(ORIGINAL).to_bytes(4, "little"))  # every size field that says 80 MiB
        path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "inflated"])
def test_a_wheel_member_over_the_cap_is_refused_before_it_is_held(tmp_path, declared):
    from vllm_hotfix.catalog.upstream import WheelReader
    from vllm_hotfix_guard.errors import InvalidInput

    wheel = _bomb(tmp_path / "w" / "tinypkg-1.0.0-py3-none-any.whl", declared)
    assert wheel.stat().st_size < 1 << 20
    reader = WheelReader(wheel)
    with pytest.raises(InvalidInput, match="declares 80.0 MiB|inflates to|not readable"):
        reader(PATCHED)
    reader.close()


def test_new_from_release_refuses_a_bomb_member(tmp_path):
    """`new --from-release`'s comparison (catalog.wheeldiff) reads members through the same cap."""
    from vllm_hotfix.catalog.wheeldiff import compare_wheels
    from vllm_hotfix_guard.errors import InvalidInput

    old = build_wheel(tmp_path / "old", "tinypkg", "1.0.0", {PATCHED: ORIGINAL})
    new = build_wheel(tmp_path / "new", "tinypkg", "1.0.1", {PATCHED: b"\0" * (80 << 20)})  # RECORD agrees
    assert new.stat().st_size < 1 << 20
    with pytest.raises(InvalidInput, match="over the 64.0 MiB"):
        compare_wheels(old, new)
