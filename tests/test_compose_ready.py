"""`hotfix compose`'s readiness (docs/readiness.md): a tmpfs for the guard's records, HOTFIX_READY_DIR, and
`python3 -I -m vllm_hotfix_guard ready` as the healthcheck; docker-compose config accepts them; --remove takes
exactly them out; what is there and not ours is never edited (a warning, the mounts still go in)."""

from __future__ import annotations

import subprocess

import pytest

from fixtures.composefiles import HOTFIX, compose_v2, validate, write_export

pytestmark = pytest.mark.tools

BASE = """\
services:
  vllm:
    image: vllm/vllm-openai:v0.30.0
    command: ["--model", "m", "--tensor-parallel-size", "2"]
  proxy:
    image: nginx
"""


@pytest.fixture
def project(tmp_path):
    write_export(tmp_path / "hotfix-export")
    return tmp_path


def compose(run_hotfix, project, *args):
    return run_hotfix("compose", HOTFIX, "--service", "vllm", "--export-dir", project / "hotfix-export", "--no-guard",
                      *args, cwd=project)  # write_export's export carries no guard


def model(path) -> dict:
    import json

    binary = compose_v2()
    if binary is None:
        pytest.skip("docker compose v2 not on PATH")
    done = subprocess.run([binary, "-f", str(path), "config", "--format", "json"], capture_output=True, text=True,
                          cwd=path.parent)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["services"]["vllm"]


def test_the_healthcheck_tmpfs_and_variable_go_in_and_remove_restores_the_bytes(project, run_hotfix):
    path = project / "compose.yaml"
    path.write_text(BASE)
    done = compose(run_hotfix, project)
    assert done.returncode == 0, done.stderr
    assert "healthcheck python3 -I -m vllm_hotfix_guard ready" in done.stdout
    text = path.read_text()
    print(text)
    assert text.endswith("    tmpfs:\n      - /run/vllm-hotfix/ready\n    healthcheck:\n"
                         "      test: [CMD, python3, -I, -m, vllm_hotfix_guard, ready]\n      interval: 10s\n"
                         "      timeout: 5s\n      retries: 3\n  proxy:\n    image: nginx\n")
    validate(path)  # check-jsonschema, docker-compose (v1) and compose v2's config
    service = model(path)
    assert service["environment"]["HOTFIX_READY_DIR"] == "/run/vllm-hotfix/ready"
    assert service["tmpfs"] == ["/run/vllm-hotfix/ready"]
    assert service["healthcheck"]["test"] == ["CMD", "python3", "-I", "-m", "vllm_hotfix_guard", "ready"]
    again = compose(run_hotfix, project)
    assert again.returncode == 0 and path.read_text() == text  # nothing twice
    assert compose(run_hotfix, project, "--remove").returncode == 0
    assert path.read_text() == BASE


def test_a_tmpfs_list_of_the_service_gets_our_entry_and_loses_only_it(project, run_hotfix):
    path = project / "compose.yaml"
    original = BASE.replace("    command:", "    tmpfs:\n      - /tmp\n    command:")
    path.write_text(original)
    assert compose(run_hotfix, project).returncode == 0
    assert "    tmpfs:\n      - /tmp\n      - /run/vllm-hotfix/ready\n" in path.read_text()
    validate(path)
    assert compose(run_hotfix, project, "--remove").returncode == 0
    assert path.read_text() == original


def test_a_healthcheck_of_its_own_is_kept_with_a_warning_and_no_readiness_adds_nothing(project, run_hotfix):
    path = project / "compose.yaml"
    original = BASE.replace("    command:", "    healthcheck:\n      test: [CMD, curl, -f, localhost:8000/health]\n"
                                           "    command:")
    path.write_text(original)
    done = compose(run_hotfix, project)
    assert done.returncode == 0, done.stderr
    assert "WARNING: readiness not added: " in done.stderr and "healthcheck is already set (line 4)" in done.stderr
    text = path.read_text()
    assert "HOTFIX_LOCK" in text and "HOTFIX_READY_DIR" not in text and "tmpfs" not in text
    assert compose(run_hotfix, project, "--remove").returncode == 0
    assert path.read_text() == original
    path.write_text(BASE)
    assert compose(run_hotfix, project, "--no-readiness").returncode == 0
    assert "HOTFIX_LOCK" in path.read_text() and "READY" not in path.read_text() and "healthcheck" not in path.read_text()
