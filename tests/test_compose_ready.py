"""`hotfix compose`'s readiness (docs/readiness.md): a tmpfs for the guard's records, HOTFIX_READY_DIR, and
`python3 -I -m vllm_hotfix_guard ready` as the healthcheck; docker-compose config accepts them; --remove takes
exactly them out; a healthcheck of the service's own is combined with the guard's probe (and given back by
--remove); what else is there and not ours is never edited (a warning, the mounts still go in)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fixtures.composefiles import HOTFIX, compose_v2, validate, write_export
from vllm_hotfix.containers import readiness

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
    return run_hotfix("compose", HOTFIX, "--service", "vllm", "--export-dir", project / "hotfix-export", "--no-guard", "--no-strict",
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


OWN_CHECKS = {  # the service's own healthcheck test, as users write it -> the argv the engine runs
    "cmd-flow": ("      test: [CMD, curl, -f, localhost:8000/health]\n", ["curl", "-f", "localhost:8000/health"]),
    "shell-block": ("      test:\n        - CMD-SHELL\n        - exit 0  # a comment kept\n", ["/bin/sh", "-c", "exit 0"]),
    "string": ("      test: curl -f localhost:8000/health || exit 1\n",
               ["/bin/sh", "-c", "curl -f localhost:8000/health || exit 1"]),
}


@pytest.mark.parametrize("case", sorted(OWN_CHECKS))
def test_a_healthcheck_of_its_own_is_kept_and_combined_and_remove_restores_the_bytes(project, run_hotfix, case):
    own, argv = OWN_CHECKS[case]
    path = project / "compose.yaml"
    original = BASE.replace("    command:", f"    healthcheck:\n{own}      interval: 30s\n      timeout: 1m30s\n    command:")
    path.write_text(original)
    done = compose(run_hotfix, project)
    assert done.returncode == 0, done.stderr
    assert "healthcheck: its own test kept, combined with `python3 -I -m vllm_hotfix_guard ready`" in done.stdout
    text = path.read_text()
    print(text)
    assert "      interval: 30s\n      timeout: 1m30s\n" in text  # the service's rhythm stays
    validate(path)  # check-jsonschema, docker-compose (v1) and compose v2's config
    test = model(path)["healthcheck"]["test"]
    assert test[:4] == ["CMD", "python3", "-I", "-c"] and test[5:] == [
        '["python3", "-I", "-m", "vllm_hotfix_guard", "ready"]', test[6], "90"]
    assert json.loads(test[6])["exec"] == {"command": argv}
    again = compose(run_hotfix, project)
    assert again.returncode == 0 and path.read_text() == text  # nothing twice
    assert compose(run_hotfix, project, "--remove").returncode == 0
    assert path.read_text() == original


@pytest.mark.parametrize("guard, own, code", [(0, 0, 0), (0, 3, 1), (1, 0, 1), (2, 0, 2)])
def test_the_combined_test_passes_only_when_the_guard_and_its_own_check_pass(guard, own, code):
    """The program the combined test runs (readiness.PROGRAM), with a stand-in for the guard's probe: the guard's
    exit code first, then the service's own check (a CMD-SHELL) within its timeout."""
    test = readiness.combined_test(["CMD-SHELL", f"exit {own}"], 5, "healthcheck.test", sys.executable)
    test[5] = json.dumps([sys.executable, "-c", f"raise SystemExit({guard})"])
    assert subprocess.run(test[1:], capture_output=True, timeout=60).returncode == code


@pytest.mark.parametrize("healthcheck, why", [
    ("    healthcheck:\n      test: [NONE]\n", "is NONE (the image's check is turned off)"),
    ("    healthcheck:\n      disable: true\n", "is turned off (disable: true)"),
    ("    healthcheck:\n      interval: 5s\n", "has no test of its own"),
    ("    healthcheck: {test: [CMD, x]}\n", "is not the service's own block mapping"),
    ("    healthcheck:\n      test: [CMD, x]\n      timeout: soon\n", "timeout is not a duration"),
    ("    healthcheck:\n      test: [CMD-SHELL, a, b]\n", "CMD-SHELL takes one command string"),
])
def test_a_healthcheck_that_cannot_be_combined_is_kept_with_a_warning(project, run_hotfix, healthcheck, why):
    path = project / "compose.yaml"
    original = BASE.replace("    command:", f"{healthcheck}    command:")
    path.write_text(original)
    done = compose(run_hotfix, project)
    assert done.returncode == 0, done.stderr
    assert "WARNING: readiness not added: " in done.stderr and why in done.stderr, done.stderr
    text = path.read_text()
    assert "HOTFIX_LOCK" in text and "HOTFIX_READY_DIR" not in text and "tmpfs" not in text
    assert compose(run_hotfix, project, "--remove").returncode == 0
    assert path.read_text() == original


def test_no_readiness_adds_nothing(project, run_hotfix):
    path = project / "compose.yaml"
    path.write_text(BASE)
    assert compose(run_hotfix, project, "--no-readiness").returncode == 0
    assert "HOTFIX_LOCK" in path.read_text() and "READY" not in path.read_text() and "healthcheck" not in path.read_text()


@pytest.mark.parametrize("text, seconds", [("30s", 30), ("1m30s", 90), ("1.5s", 2), ("500ms", 1), ("1h", 3600),
                                           ("45", 45), (45, 45), ("2m", 120), ("", None), ("soon", None),
                                           ("5s5", None), (True, None), ("-5s", None)])
def test_compose_durations_in_whole_seconds(text, seconds):
    assert readiness.duration_seconds(text) == seconds
