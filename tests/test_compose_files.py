"""`hotfix compose` on compose files as people write them: anchors, CRLF, `---`, symlinks, discovery.

Every edited file is checked by check-jsonschema and `docker-compose config`; `--remove` must give back
the original bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fixtures.composefiles import HOTFIX, PATH, SITE, validate, write_export
from vllm_hotfix_guard.txn.hotfix_lock import Lock, LockedFile, LockedHotfix

READINESS = (b"healthcheck:", b"test: [CMD, python3, -I, -m, vllm_hotfix_guard, ready]", b"interval: ", b"timeout: ",
             b"retries: ", b"tmpfs:")  # docs/readiness.md: our lines that do not say hotfix


ANCHORS = """\
---
# shared settings, as in many production files
x-common: &common
  image: vllm/vllm-openai:v0.30.0
  volumes:
    - ./models:/models:ro
  environment: &env
    NCCL_DEBUG: WARN

services:
  vllm:
    <<: *common
    command: ["--model", "/models/glm"]
  vllm-b:
    <<: *common
    environment: *env
  proxy:
    image: "nginx:1.27"
    volumes: [./nginx.conf:/etc/nginx/nginx.conf:ro]
"""

PLAIN = """\
---
services:
    vllm:
        image: 'vllm/vllm-openai:v0.30.0'   # pinned
        volumes:
        -   ./models:/models:ro
        environment:
            - NCCL_DEBUG=WARN
    proxy:
        image: "nginx:1.27"
        ports: ["8080:80"]
"""


@pytest.fixture
def project(tmp_path):
    """A directory with an export (hotfix.lock + the patched file) and nothing else."""
    write_export(tmp_path / "hotfix-export")
    return tmp_path


def _compose(run_hotfix, project, *args, env=None):
    return run_hotfix("compose", HOTFIX, "--service", "vllm", "--export-dir", project / "hotfix-export", "--no-guard", "--no-strict",
                      *args, cwd=project, env=env)  # write_export's export carries no guard


@pytest.mark.tools
@pytest.mark.parametrize("crlf", [False, True])
def test_document_marker_crlf_and_indentation_survive_and_remove_restores_bytes(project, run_hotfix, crlf):
    original = (PLAIN.replace("\n", "\r\n") if crlf else PLAIN).encode()
    path = project / "compose.yaml"
    path.write_bytes(original)
    done = _compose(run_hotfix, project)  # found by compose v2 discovery: no --file
    assert done.returncode == 0, done.stderr
    edited = path.read_bytes()
    nl = b"\r\n" if crlf else b"\n"
    assert edited.startswith(b"---" + nl)
    assert (b"        -   ./models:/models:ro" + nl + b"        - ./hotfix-export/" + HOTFIX.encode()) in edited
    assert b"            - HOTFIX_LOCK=/etc/vllm-hotfix/hotfix.lock" + nl in edited
    assert (b"\n" not in edited.replace(b"\r\n", b"")) if crlf else (b"\r" not in edited)
    # everything but our lines is the original, byte for byte
    ours = [line for line in edited.splitlines(True) if b"hotfix" in line.lower() or line.strip().startswith(READINESS)]
    assert b"".join(line for line in edited.splitlines(True) if line not in ours) == original
    assert f"added to services.vllm in {path}" in done.stdout
    validate(path)
    assert _compose(run_hotfix, project, "--remove").returncode == 0
    assert path.read_bytes() == original


@pytest.mark.tools
def test_symlinked_compose_file_is_written_through(project, run_hotfix):
    real = project / "deploy" / "prod.yml"
    real.parent.mkdir()
    real.write_text(PLAIN)
    link = project / "docker-compose.yml"
    link.symlink_to(real)
    assert _compose(run_hotfix, project, "--file", link).returncode == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert "hotfix.lock" in real.read_text()
    validate(link)
    assert _compose(run_hotfix, project, "--file", link, "--remove").returncode == 0
    assert link.is_symlink() and real.read_text() == PLAIN


def _refused_unchanged(run_hotfix, project, text: str, reason: str) -> Path:
    """A valid compose file the tool must refuse to edit (exit 3, the reason, --override), left as it was."""
    path = project / "docker-compose.yml"
    path.write_text(text)
    validate(path)
    done = _compose(run_hotfix, project)
    assert done.returncode == 3 and reason in done.stderr and "--override" in done.stderr
    assert path.read_text() == text
    return path


@pytest.mark.tools
def test_shared_anchor_is_never_edited(project, run_hotfix):
    path = _refused_unchanged(run_hotfix, project, ANCHORS,
                              "services.vllm.volumes comes from the shared anchor &common (line 3)")

    override = project / "compose.hotfix.yml"
    done = _compose(run_hotfix, project, "--override", override)
    assert done.returncode == 0, done.stderr
    assert path.read_text() == ANCHORS
    assert f"docker compose -f {path} -f {override} up -d" in done.stdout and "COMPOSE_FILE=" in done.stdout
    validate(path, override)
    assert _compose(run_hotfix, project, "--override", override, "--remove").returncode == 0
    assert not override.exists()


@pytest.mark.tools
def test_alias_of_a_shared_environment_is_refused(project, run_hotfix):
    text = ANCHORS.replace("  vllm-b:\n    <<: *common\n    environment: *env\n", "")
    text = text.replace("    command: [\"--model\", \"/models/glm\"]\n",
                        "    command: [\"--model\", \"/models/glm\"]\n    volumes:\n      - ./models:/models:ro\n"
                        "    environment: *env\n")
    text += "  other:\n    image: busybox\n    environment: *env\n"
    _refused_unchanged(run_hotfix, project, text, "services.vllm.environment is the anchored node &env (line 7)")


@pytest.mark.tools
def test_local_keys_next_to_a_merge_are_edited_and_the_anchor_is_not(project, run_hotfix):
    text = ANCHORS.replace("    <<: *common\n    command:", "    <<: *common\n    volumes:\n      - ./models:/models:ro\n"
                           "    environment:\n      NCCL_DEBUG: INFO\n    command:", 1)
    path = project / "docker-compose.yml"
    path.write_text(text)
    done = _compose(run_hotfix, project)
    assert done.returncode == 0, done.stderr
    edited = path.read_text()
    assert edited.split("services:")[0] == text.split("services:")[0], "the anchor block is untouched"
    assert "      HOTFIX_LOCK: /etc/vllm-hotfix/hotfix.lock\n      HOTFIX_READY_DIR: /run/vllm-hotfix/ready\n    command:" in edited
    validate(path)
    assert _compose(run_hotfix, project, "--remove").returncode == 0
    assert path.read_text() == text


def test_compose_file_env_var_and_discovery_order(project, run_hotfix):
    (project / "docker-compose.yml").write_text(PLAIN)
    (project / "compose.yaml").write_text(PLAIN)
    sub = project / "sub"
    sub.mkdir()
    done = run_hotfix("compose", HOTFIX, "--service", "vllm", "--export-dir", project / "hotfix-export", "--no-guard", "--no-strict",
                      cwd=sub)
    assert done.returncode == 0, done.stderr
    assert "hotfix.lock" in (project / "compose.yaml").read_text()  # compose.yaml first, found from a subdirectory
    assert (project / "docker-compose.yml").read_text() == PLAIN
    base = project / "base.yml"
    base.write_text("services:\n  proxy:\n    image: nginx\n")
    extra = project / "gpu.yml"
    extra.write_text(PLAIN)
    env = {"COMPOSE_FILE": f"base.yml{os.pathsep}gpu.yml"}
    done = _compose(run_hotfix, project, env=env)
    assert done.returncode == 0, done.stderr
    assert "hotfix.lock" in extra.read_text() and "hotfix" not in base.read_text()  # the file that defines vllm


def test_override_beside_the_base_is_loaded_by_compose_itself(project, run_hotfix):
    (project / "compose.yaml").write_text(PLAIN)
    done = _compose(run_hotfix, project, "--override", project / "compose.override.yaml")
    assert done.returncode == 0, done.stderr
    assert "loads compose.override.yaml beside compose.yaml by itself" in done.stdout


def test_host_venv_site_packages_warns(project, run_hotfix, tmp_path):
    lock_path = project / "hotfix-export" / "hotfix.lock"
    lock_path.write_text(lock_path.read_text().replace(SITE, "/home/me/.venv/lib/python3.12/site-packages"))
    (project / "compose.yaml").write_text(PLAIN)
    done = _compose(run_hotfix, project)
    assert done.returncode == 0
    assert "WARNING: the mounts go to /home/me/.venv/lib/python3.12/site-packages" in done.stderr
    assert "--container-site-packages" in done.stderr
    quiet = _compose(run_hotfix, project, "--remove")
    assert "WARNING" not in quiet.stderr
    again = _compose(run_hotfix, project, "--container-site-packages", SITE)
    assert again.returncode == 0 and "WARNING" not in again.stderr


EDGE_CASES = [
    "services:\n  vllm:\n  other: {image: x}",                       # null service (override), no final newline
    "services:\n  vllm:\n    image: x\n    environment: {A: b}\n    volumes: []\n",  # flow collections
    "services:\n  vllm:\n    image: x",                                             # no final newline
    "services:\r\n  vllm:\r\n    image: x\r\n    volumes:\r\n      - ./a:/a",           # CRLF, no final newline
    "services:\n  vllm:\n    image: x\n    environment:\n      - A=b\n    volumes:\n      - './a:/a' # c\n\n# end\n",
    "---\nservices:\n  vllm:\n    image: x\n...\n",                                # document end marker
    "services:\n  vllm:\n    image: x\n    environment:\n      A: b\n",            # new volumes after the env line
]


@pytest.mark.tools
@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_round_trip_byte_for_byte(text, tmp_path):
    from vllm_hotfix.containers import compose_edit, compose_mounts

    lock = Lock(SITE, (LockedHotfix(HOTFIX, 1, "vllm", "vllm", "0.30.0", None,
                                    (LockedFile(PATH, "0" * 64, "1" * 64, f"{HOTFIX}/{PATH}"),)),))
    mounts = compose_mounts.mounts_for(lock, lock.hotfixes, "./hotfix-export")
    added = compose_edit.add_mounts(text, "vllm", mounts).text
    assert mounts.lock.spec in added and "HOTFIX_LOCK" in added
    assert compose_edit.add_mounts(added, "vllm", mounts).text == added
    assert compose_edit.remove_mounts(added, "vllm", mounts).text == text
    path = tmp_path / "compose.yaml"
    path.write_text(added)
    if "image: x\n" in added.split("other:")[0]:  # the null service has no image: an override fragment
        validate(path)


def test_mounts_into_the_host_s_site_packages_warn_with_the_question_to_ask_the_service(project, run_hotfix):
    """An export from a host venv: the mounts go in, with one warning naming the service to ask (`docker compose
    exec vllm ...`, as pasted); --container-site-packages silences it."""
    import json

    lock = project / "hotfix-export" / "hotfix.lock"
    lock.write_text(json.dumps({**json.loads(lock.read_text()), "site_packages": "/tmp/build/venv/lib/python3.12/site-packages"}))
    (project / "compose.yaml").write_text(PLAIN)
    done = _compose(run_hotfix, project)
    assert done.returncode == 0, done.stderr
    ask = """docker compose exec vllm python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))'"""
    assert "WARNING: the mounts go to /tmp/build/venv/lib/python3.12/site-packages" in done.stderr
    assert f"`{ask}` prints" in done.stderr, done.stderr
    (project / "compose.yaml").write_text(PLAIN)
    quiet = _compose(run_hotfix, project, "--container-site-packages", "/usr/lib/python3/dist-packages")
    assert quiet.returncode == 0 and "WARNING" not in quiet.stderr, quiet.stderr
