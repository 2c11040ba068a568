"""The container tier's fixtures (tests/fixtures/podman.py); each test file here is marked `container`."""

from __future__ import annotations

import pytest

from fixtures import podman


@pytest.fixture(scope="session")
def stock_image() -> str:
    """The stock image (vLLM 0.30.0 in /opt/venv, no vllm-hotfix), built once and cached."""
    podman.require()
    return podman.stock_image()


@pytest.fixture
def compose_engine(tmp_path):
    """docker-compose against a `podman system service` of this test's own."""
    podman.require()
    engine = podman.ComposeEngine(tmp_path)
    try:
        yield engine
    finally:
        engine.close()
