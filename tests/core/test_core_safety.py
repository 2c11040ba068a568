"""core/safety.py: paths taken from a patch follow git's verify_path (git's own answers: test_core_git_corpus)."""

from __future__ import annotations

import pytest

from vllm_hotfix_guard.core.safety import check_patch_path, invalid_path_reason
from vllm_hotfix_guard.errors import ExitCode, Refused
from vllm_hotfix_guard.output import quote_path


@pytest.mark.parametrize("path", ["vllm/x.py", "été.py", "..hidden/x", "a/..b", "a/.../b", ".gitignore",
                                  "sub/.gitattributes", ".gitfoo/x", "git~2/x", "a\\b", "x.git/y", "git/x",
                                  ".g\u200citx/y"])
def test_paths_git_accepts_pass(path):
    assert invalid_path_reason(path) is None
    check_patch_path(path)


@pytest.mark.parametrize(("path", "why"), [
    ("", "empty path"),
    ("/etc/passwd", "absolute"),
    ("../x.py", "'..' component"),
    ("vllm/../../x.py", "'..' component"),
    ("pkg/../pkg/mod.py", "'..' component"),
    ("pkg/link/../m.py", "'..' component"),
    ("vllm/..", "'..' component"),
    ("./vllm/x.py", "'.' component"),
    ("a/./b", "'.' component"),
    ("a//b", "empty component"),
    ("newdir/", "ends with '/'"),
    ("vllm/\0x.py", "NUL byte"),
    (".git/config", "'.git' component"),
    (".git/hooks/x", "'.git' component"),
    (".GIT/x", "'.git' component"),
    ("sub/.Git", "'.git' component"),
    ("git~1/x", "NTFS"),
    ("GIT~1/config", "NTFS"),
    (".git. . /x", "NTFS"),
    (".git::$INDEX_ALLOCATION/config", "NTFS"),
    (".git:stream", "NTFS"),
    ("a\\.git\\config", "NTFS"),
    ("a\\git~1", "NTFS"),
    (".g\u200cit/x", "HFS+"),
    ("\ufeff.GIT/x", "HFS+"),
    (".gi\u200dt\u200e", "HFS+"),
    (".git\udcff/x", "HFS+"),  # a byte that is not UTF-8 right after '.git' ends the name for git's reader
])
def test_paths_git_refuses_are_refused(path, why):
    assert why in invalid_path_reason(path)
    with pytest.raises(Refused) as caught:
        check_patch_path(path)
    assert caught.value.message.startswith("invalid path ") and why in caught.value.message
    assert caught.value.exit_code == ExitCode.REFUSED and caught.value.hint


def test_refusal_quotes_the_name():
    with pytest.raises(Refused) as caught:
        check_patch_path(".git/x\nFAKE LINE")
    assert "\n" not in caught.value.message
    assert caught.value.message.startswith('invalid path ".git/x\\nFAKE LINE": ')


@pytest.mark.parametrize(("name", "shown"), [
    ("vllm/x.py", "vllm/x.py"),
    ("my file.py", "my file.py"),
    ("b/x\nFAKE LINE", '"b/x\\nFAKE LINE"'),
    ("caf\u00e9.py", '"caf\\303\\251.py"'),
    ('a"b', '"a\\"b"'),
    ("a\\b", '"a\\\\b"'),
    ("\x1b[31mred\x7f", '"\\033[31mred\\177"'),
    ("tab\there\r", '"tab\\there\\r"'),
    ("x\udcff", '"x\\377"'),
])
def test_quote_path_is_git_quote_c_style(name, shown):
    assert quote_path(name) == shown
