import os

import pytest

from vllm_hotfix_guard.errors import Refused
from vllm_hotfix.install.tree import Tree


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "root"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_bytes(b"x = 1\r\n")
    os.chmod(root / "pkg" / "mod.py", 0o755)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.py").write_bytes(b"secret\n")
    return root


def test_reads_bytes_and_mode_and_missing_is_none(root):
    tree = Tree(root)
    state = tree.read("pkg/mod.py")
    assert state.data == b"x = 1\r\n" and state.mode & 0o777 == 0o755
    assert tree.read("pkg/new.py") is None



@pytest.mark.parametrize("bad, message", [
    ("/etc/passwd", "is absolute"),
    ("../outside/secret.py", "'..' component"),
    ("pkg/../../outside/secret.py", "'..' component"),
    ("..", "'..' component"),
    ("", "empty path"),
    # git's verify_path: not even a path that stays inside the root may take a detour (a symlink on
    # the way would make it name another file than it says)
    ("pkg/./sub/../mod.py", "'.' component"),
    ("pkg/../pkg/mod.py", "'..' component"),
    ("pkg//mod.py", "empty component"),
    (".git/config", "'.git' component"),
])
def test_refuses_paths_outside_the_root(root, bad, message):
    with pytest.raises(Refused, match=message):
        Tree(root).read(bad)


def test_refuses_symlinks_leading_outside(root):
    (root / "pkg" / "link.py").symlink_to(root.parent / "outside" / "secret.py")
    (root / "linkdir").symlink_to(root.parent / "outside")
    (root / "dangling.py").symlink_to(root.parent / "outside" / "nothing.py")
    tree = Tree(root)
    for rel in ("pkg/link.py", "linkdir/secret.py", "linkdir/new.py", "dangling.py"):
        with pytest.raises(Refused, match=f"{rel}: leads outside .* through a symlink"):
            tree.read(rel)
        with pytest.raises(Refused):
            tree.path(rel)


def test_symlinks_inside_the_root_are_refused_as_git_apply_does(root):
    """git apply: "affected file ... is beyond a symbolic link"; a symlinked file is not a text file."""
    (root / "alias").symlink_to(root / "pkg")
    (root / "pkg" / "same.py").symlink_to(root / "pkg" / "mod.py")
    (root / "pkg" / "dangling.py").symlink_to(root / "pkg" / "gone.py")
    tree = Tree(root)
    for rel in ("alias/mod.py", "alias/new.py"):
        with pytest.raises(Refused, match=f"^{rel}: is beyond a symbolic link \\(alias\\)"):
            tree.read(rel)
    for rel in ("pkg/same.py", "pkg/dangling.py"):
        with pytest.raises(Refused, match=f"^{rel}: is a symbolic link"):
            tree.read(rel)
    via_link = root.parent / "root-link"  # the root itself may be reached through a symlink
    via_link.symlink_to(root)
    assert Tree(via_link).read("pkg/mod.py").data == b"x = 1\r\n"


def test_a_path_below_a_regular_file_is_refused(root):
    with pytest.raises(Refused, match="^pkg/mod.py/x: a parent of it is a regular file"):
        Tree(root).read("pkg/mod.py/x")


def test_directory_is_refused(root):
    with pytest.raises(Refused, match="pkg: is a directory"):
        Tree(root).read("pkg")
