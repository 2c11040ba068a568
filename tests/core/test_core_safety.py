"""core/safety.py: paths taken from a patch may only name files under the target root."""

from __future__ import annotations

import pytest

from vllm_hotfix.core.safety import check_relative_path, normalised_relative_path
from vllm_hotfix.errors import ExitCode, Refused


@pytest.mark.parametrize("path", ["vllm/x.py", "a/../b.py", "./vllm/x.py", "été.py", "..hidden/x", "a/..b"])
def test_relative_paths_inside_the_root_pass(path):
    check_relative_path(path)


@pytest.mark.parametrize(("path", "why"), [
    ("", "empty path"),
    ("/etc/passwd", "is absolute"),
    ("../x.py", "escapes the target root"),
    ("vllm/../../x.py", "escapes the target root"),
    ("..", "escapes the target root"),
    ("vllm/..", "escapes the target root"),
    ("vllm/\0x.py", "contains a NUL byte"),
])
def test_unsafe_paths_are_refused(path, why):
    with pytest.raises(Refused) as caught:
        check_relative_path(path)
    assert why in str(caught.value) and caught.value.exit_code == ExitCode.REFUSED and caught.value.hint


def test_normal_form():
    assert normalised_relative_path("./vllm//a/../x.py") == "vllm/x.py"
