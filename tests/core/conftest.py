from __future__ import annotations

import pytest
from core_helpers import Repo


@pytest.fixture
def repo(tmp_path) -> Repo:
    """A real git work tree made for the test."""
    return Repo(tmp_path / "repo")
