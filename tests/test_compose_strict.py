"""`hotfix compose --strict` (the default, as `hotfix k8s`'s): HOTFIX_STRICT=1 goes into the service's environment
right after HOTFIX_LOCK, in the file's own style; compose v2 reads it back as "1"; `--remove` takes it out from
there and gives back the bytes. A HOTFIX_STRICT the service sets itself stays (and --remove leaves it); one that
says otherwise than the option is refused, nothing written. A file written by compose before --strict existed
gets the one line on the next run, and --remove still gives back the file as it was before vllm-hotfix."""

from __future__ import annotations

import pytest

from fixtures.composefiles import HOTFIX, LIST_ENV, config, validate, write_export
from fixtures.trees import snapshot
from vllm_hotfix.containers import compose_edit, compose_mounts
from vllm_hotfix_guard.errors import Refused
from vllm_hotfix_guard.txn.hotfix_lock import Lock, LockedFile, LockedHotfix

pytestmark = pytest.mark.tools

PATH = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
SERVICE = "services:\n  vllm:\n    image: vllm/vllm-openai:v0.30.0\n"
TEXTS = {
    "list": LIST_ENV,
    "mapping": SERVICE + "    environment:\n      NCCL_DEBUG: WARN   # keep\n    shm_size: 32g\n",
    "flow list": SERVICE + "    environment: [NCCL_DEBUG=WARN]\n",
    "flow mapping": SERVICE + "    environment: {NCCL_DEBUG: WARN}\n",
    "none": SERVICE,
    "empty": SERVICE + "    environment:\n",
    "no final newline": SERVICE + "    environment:\n      - NCCL_DEBUG=WARN",
    "crlf": (SERVICE + "    environment:\n      NCCL_DEBUG: WARN\n").replace("\n", "\r\n"),
}


def mounts(strict: bool, *more: str) -> compose_mounts.Mounts:
    files = [LockedFile(p, "0" * 64, "1" * 64, f"{HOTFIX}/{p}") for p in (PATH, *more)]
    hotfix = LockedHotfix(HOTFIX, 1, "vllm", "vllm", "0.30.0", "0.32.0", tuple(files))
    lock = Lock(site_packages="/usr/local/lib/python3.12/site-packages", hotfixes=(hotfix,))
    return compose_mounts.mounts_for(lock, lock.hotfixes, "./hotfix-export", strict=strict)


def env_lines(text: str) -> list[str]:
    """Our environment entries as written, in order (flow style: each item)."""
    items = [i.strip(" []{}") for line in text.splitlines() for i in line.split(",")]
    return [i for i in items if "HOTFIX_" in i and "/etc/vllm-hotfix/hotfix.lock:ro" not in i]


@pytest.mark.parametrize("style", TEXTS)
def test_strict_goes_right_after_the_lock_and_remove_gives_back_the_bytes(tmp_path, style):
    text = TEXTS[style]
    added = compose_edit.add_mounts(text, "vllm", mounts(True))
    assert added.added[-2:] == ("HOTFIX_LOCK=/etc/vllm-hotfix/hotfix.lock", "HOTFIX_STRICT=1")
    lock_at = added.text.index("HOTFIX_LOCK")
    assert added.text.index("HOTFIX_STRICT") > lock_at and "NCCL" not in added.text[lock_at:added.text.index("HOTFIX_STRICT")]
    assert compose_edit.add_mounts(added.text, "vllm", mounts(True)).text == added.text  # nothing more to add
    removed = compose_edit.remove_mounts(added.text, "vllm", mounts(True)).text
    assert removed == (SERVICE if style == "empty" else text)  # an empty `environment:` goes with our entries
    path = tmp_path / "compose.yaml"
    path.write_bytes(added.text.encode())
    validate(path)
    env = config(path)["services"]["vllm"]["environment"]
    assert env["HOTFIX_STRICT"] == "1" and env["HOTFIX_LOCK"] == "/etc/vllm-hotfix/hotfix.lock", env


@pytest.mark.parametrize("style", TEXTS)
def test_a_file_written_before_strict_existed_gets_one_line_and_remove_still_gives_back_the_original(tmp_path, style):
    text = TEXTS[style]
    old = compose_edit.add_mounts(text, "vllm", mounts(False)).text  # what compose wrote before --strict
    assert "HOTFIX_STRICT" not in old
    new = compose_edit.add_mounts(old, "vllm", mounts(True))
    assert new.added == ("HOTFIX_STRICT=1",)
    assert env_lines(new.text)[env_lines(new.text).index(env_lines(old)[0]) + 1].lstrip("- ").startswith("HOTFIX_STRICT")
    if style == "list":
        assert new.text == old.replace("      - HOTFIX_LOCK=/etc/vllm-hotfix/hotfix.lock\n",
                                       "      - HOTFIX_LOCK=/etc/vllm-hotfix/hotfix.lock\n      - HOTFIX_STRICT=1\n")
    for edited in (old, new.text):  # whatever the flag: the strict line is taken out with the lock's
        assert compose_edit.remove_mounts(edited, "vllm", mounts(False)).text == (SERVICE if style == "empty" else text)
    path = tmp_path / "compose.yaml"
    path.write_bytes(new.text.encode())
    assert config(path)["services"]["vllm"]["environment"]["HOTFIX_STRICT"] == "1"


def test_strict_stays_while_another_hotfix_mount_remains():
    both = compose_edit.add_mounts(LIST_ENV, "vllm", mounts(True, "vllm/a.py")).text
    partly = compose_edit.remove_mounts(both, "vllm", mounts(True))
    assert "HOTFIX_STRICT=1" not in partly.removed and "- HOTFIX_STRICT=1\n" in partly.text
    assert compose_edit.remove_mounts(both, "vllm", mounts(True, "vllm/a.py")).text == LIST_ENV


@pytest.mark.parametrize("own", ["      - HOTFIX_STRICT=1\n", "      - HOTFIX_STRICT=true\n"])
def test_the_service_s_own_strict_mode_is_kept_and_left_by_remove(own):
    text = LIST_ENV.replace("      - NCCL_DEBUG=WARN\n", "      - NCCL_DEBUG=WARN\n" + own)
    added = compose_edit.add_mounts(text, "vllm", mounts(True))
    assert not any(a.startswith("HOTFIX_STRICT") for a in added.added) and added.text.count("HOTFIX_STRICT") == 1
    assert compose_edit.remove_mounts(added.text, "vllm", mounts(True)).text == text


@pytest.mark.parametrize("own, strict", [("HOTFIX_STRICT: \"0\"", True), ("HOTFIX_STRICT: \"\"", True),
                                         ("HOTFIX_STRICT: \"1\"", False), ("HOTFIX_STRICT: \"on\"", False)])
def test_a_strict_mode_of_the_service_s_own_that_the_option_contradicts_is_refused(own, strict):
    text = SERVICE + f"    environment:\n      {own}\n"
    with pytest.raises(Refused, match=r"services\.vllm\.environment sets HOTFIX_STRICT=.*: not edited") as refused:
        compose_edit.add_mounts(text, "vllm", mounts(strict))
    assert ("pass --no-strict" if strict else "drop --no-strict") in refused.value.hint


def test_the_command_writes_strict_by_default_and_remove_gives_back_the_user_s_file(tmp_path, run_hotfix):
    """End to end (its readiness pass included): --no-strict writes what compose wrote before --strict existed;
    the next run (strict, the default) adds one line, right after HOTFIX_LOCK; --no-strict on that file is
    refused, nothing written; --remove gives back the user's file."""
    from fixtures.kube import make_export

    make_export(tmp_path / "hotfix-export")  # with the guard
    compose_file = tmp_path / "docker-compose.yml"
    compose_file.write_text(LIST_ENV)
    args = ("compose", "--service", "vllm", "--file", compose_file)
    assert run_hotfix(*args, "--no-strict", cwd=tmp_path).returncode == 0
    old = compose_file.read_text()
    assert "HOTFIX_STRICT" not in old and "HOTFIX_READY_DIR" in old
    dry = run_hotfix(*args, "--dry-run", cwd=tmp_path)
    assert [line for line in dry.stdout.splitlines() if line.startswith("+") and not line.startswith("+++")] == [
        "+      - HOTFIX_STRICT=1"], dry.stdout
    done = run_hotfix(*args, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == f"added to services.vllm in {compose_file}: HOTFIX_STRICT=1\n"
    assert env_lines(compose_file.read_text()) == [
        "- HOTFIX_LOCK=/etc/vllm-hotfix/hotfix.lock", "- HOTFIX_STRICT=1", "- HOTFIX_READY_DIR=/run/vllm-hotfix/ready"]
    before = snapshot(tmp_path)
    refused = run_hotfix(*args, "--no-strict", cwd=tmp_path)
    assert refused.returncode == 3 and snapshot(tmp_path) == before, refused.stderr
    assert "sets HOTFIX_STRICT=1, strict mode, and this is --no-strict" in refused.stderr
    assert run_hotfix(*args, "--remove", "--no-strict", cwd=tmp_path).returncode == 0  # any flag: the line goes
    assert compose_file.read_text() == LIST_ENV
