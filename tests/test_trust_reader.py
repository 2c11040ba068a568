"""Issue 31, one bounded reader for data files: patch files, target files, export files and Kubernetes
manifests are opened O_NOFOLLOW|O_NONBLOCK, must be regular files and are capped (inputs.read_input);
export files must hold the lock's sha256 before they go into a ConfigMap, a bind mount or a bake context. Each command
runs with a timeout (a FIFO must never hang it) and is checked for exit code and an unchanged tree."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.composefiles import HOTFIX as COMPOSE_HOTFIX, LIST_ENV, write_export
from fixtures.kube import DEPLOYMENT, make_export
from fixtures.trees import one_file_target, snapshot

SECRET = b"root:$6$not-for-anyone's-eyes:19000:0:99999:7:::\n"
TIMEOUT = 60  # a hang fails the test instead of the suite


def hotfix(*args, cwd=None, env=None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "vllm_hotfix", *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=cwd, env=full, stdin=subprocess.DEVNULL)


def error(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.startswith("hotfix: error: ")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.fixture
def target(tmp_path) -> tuple[Path, Path]:
    return one_file_target(tmp_path)


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_patch_that_is_a_fifo_or_a_device_is_refused_at_once(tmp_path, target, _isolated_state, kind):
    root, _ = target
    patch = Path("/dev/zero") if kind == "/dev/zero" else tmp_path / "evil.diff"
    if kind == "fifo":
        os.mkfifo(patch)
    before, state = snapshot(tmp_path), snapshot(_isolated_state)
    for command in (("apply", "--patch", patch, "--root", root, "--dry-run"), ("apply", "--patch", patch, "--root", root),
                    ("contains", "--patch", patch, "--root", root)):
        done = hotfix(*command)
        assert done.returncode == 8, (command, done.stderr)
        assert "not a regular file; a patch file must be one" in error(done)
    assert snapshot(tmp_path) == before and snapshot(_isolated_state) == state


def test_a_patch_over_the_cap_is_refused_before_it_is_read(tmp_path, target):
    root, _ = target
    big = tmp_path / "big.diff"
    with open(big, "wb") as fh:
        fh.truncate(65 << 20)  # sparse: 65 MiB of nothing
    done = hotfix("contains", "--patch", big, "--root", root)
    assert done.returncode == 8 and "patch file is 65.0 MiB, over the 64.0 MiB a patch file may be" in error(done)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_fifo_or_link_in_place_of_a_target_file_never_hangs_status_verify_rollback(tmp_path, target,
                                                                                      _isolated_state, kind):
    root, patch = target
    assert hotfix("apply", "--patch", patch, "--root", root).returncode == 0
    planted = root / "pkg" / "m.py"
    planted.unlink()
    if kind == "fifo":
        os.mkfifo(planted)
    else:
        (tmp_path / "secret").write_bytes(SECRET)
        planted.symlink_to(tmp_path / "secret")
    before, state = snapshot(tmp_path), snapshot(_isolated_state)
    expected = {("status", "--root", root): 3, ("status", "--all"): 1, ("verify", "--root", root): 3,
                ("rollback", "m", "--root", root): 3}
    for command, code in expected.items():
        done = hotfix(*command)
        assert done.returncode == code, (command, done.returncode, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and hashlib.sha256(SECRET).hexdigest() not in done.stdout + done.stderr
    assert snapshot(tmp_path) == before and snapshot(_isolated_state) == state


def test_tree_read_refuses_a_link_swapped_in_after_the_check(tmp_path):
    """The lstat-then-open race: Tree.read's open itself refuses a link (O_NOFOLLOW), whatever the check saw."""
    from vllm_hotfix_guard.errors import Refused
    from vllm_hotfix.install.tree import Tree

    root = tmp_path / "root"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "m.py").write_bytes(b"a\n")
    (tmp_path / "secret").write_bytes(SECRET)
    tree = Tree(root)
    checked = tree.checked_path

    def swap_after_check(rel: str) -> str:
        path = checked(rel)
        os.unlink(path)
        os.symlink(tmp_path / "secret", path)  # the attacker wins the race
        return path

    tree.checked_path = swap_after_check
    with pytest.raises(Refused, match="is a symbolic link"):
        tree.read("pkg/m.py")


# ---- export files: checked against the lock before a ConfigMap or a mount ------------------------------

def _export_attack(export: Path, rel: str, kind: str, tmp_path: Path) -> None:
    exported = export / rel
    exported.unlink()
    if kind == "link":
        (tmp_path / "secret").write_bytes(SECRET)
        exported.symlink_to(tmp_path / "secret")
    elif kind == "fifo":
        os.mkfifo(exported)
    else:
        exported.write_bytes(b"# not what the lock names\n")


@pytest.mark.parametrize("kind", ["link", "fifo", "changed"])
def test_k8s_refuses_an_export_file_that_is_not_the_locked_bytes(tmp_path, kind):
    export = make_export(tmp_path / "export")
    from vllm_hotfix_guard.txn.hotfix_lock import load_lock

    locked = load_lock(export / "hotfix.lock").mounted_files()[0]
    _export_attack(export, locked.export, kind, tmp_path)
    base = tmp_path / "rendered.yaml"
    base.write_text(DEPLOYMENT)
    before = snapshot(tmp_path)
    done = hotfix("k8s", "--export-dir", export, "--base", base, "--to", tmp_path / "overlay", "--container", "vllm",
                  "--workload", "deployment/vllm",
                  env={"HOTFIX_KUBECTL": ""})
    assert done.returncode == 8, done.stderr
    why = {"link": "is a symbolic link", "fifo": "not a regular file", "changed": "does not hold the bytes"}[kind]
    assert f"{export / locked.export}: {why}" in error(done)
    assert SECRET.decode() not in done.stdout + done.stderr
    assert snapshot(tmp_path) == before and not (tmp_path / "overlay").exists()


@pytest.mark.parametrize("kind", ["link", "fifo", "changed"])
def test_compose_refuses_to_mount_an_export_file_that_is_not_the_locked_bytes(tmp_path, kind):
    export = write_export(tmp_path / "hotfix-export")
    from fixtures.composefiles import PATH

    _export_attack(export, f"{COMPOSE_HOTFIX}/{PATH}", kind, tmp_path)
    (tmp_path / "compose.yaml").write_text(LIST_ENV)
    before = snapshot(tmp_path)
    done = hotfix("compose", COMPOSE_HOTFIX, "--service", "vllm", "--export-dir", export, cwd=tmp_path)
    assert done.returncode == 8, done.stderr
    assert snapshot(tmp_path) == before


def test_a_kubernetes_base_that_is_a_fifo_is_refused(tmp_path):
    export = make_export(tmp_path / "export")
    base = tmp_path / "rendered.yaml"
    os.mkfifo(base)
    done = hotfix("k8s", "--export-dir", export, "--base", base, "--to", tmp_path / "overlay", "--container", "vllm",
                  "--workload", "deployment/vllm",
                  env={"HOTFIX_KUBECTL": ""})
    assert done.returncode == 8 and "not a regular file" in error(done)
    assert not (tmp_path / "overlay").exists()
