"""containers/compose_edit.py: round-trip edits keep comments, are idempotent, undo byte for byte, and validate."""

from __future__ import annotations


import pytest

from fixtures.composefiles import LIST_ENV, validate
from vllm_hotfix.containers import compose_edit, compose_mounts
from vllm_hotfix_guard.errors import Refused, UsageError
from vllm_hotfix_guard.txn.hotfix_lock import Lock, LockedFile, LockedHotfix

PATH = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
SITE = "/usr/local/lib/python3.12/site-packages"


MAPPING_ENV = """\
services:
  vllm:
    image: 'vllm/vllm-openai:v0.30.0'
    environment:
      NCCL_DEBUG: WARN   # keep
    volumes:
    - ./models:/models:ro
    shm_size: 32g  # big

    # about the next service
  other:
    image: busybox
# end of file
"""


def make_mounts(container_site_packages: str | None = None) -> compose_mounts.Mounts:
    locked = LockedFile(PATH, "0" * 64, "1" * 64, f"mamba-align-block-size/{PATH}")
    hotfix = LockedHotfix("mamba-align-block-size", 1, "vllm", "vllm", "0.30.0", "0.32.0", (locked,))
    lock = Lock(site_packages=SITE, hotfixes=(hotfix,))
    return compose_mounts.mounts_for(lock, lock.hotfixes, "./hotfix-export", container_site_packages)


def test_mount_spec_is_short_syntax_read_only():
    mounts = make_mounts()
    assert mounts.hotfix[0].spec == f"./hotfix-export/mamba-align-block-size/{PATH}:{SITE}/{PATH}:ro"
    assert mounts.lock.spec == "./hotfix-export/hotfix.lock:/etc/vllm-hotfix/hotfix.lock:ro"


def test_host_source_relative_under_compose_dir_else_absolute(tmp_path):
    assert compose_mounts.host_source(tmp_path / "hotfix-export", tmp_path) == "./hotfix-export"
    assert compose_mounts.host_source(tmp_path / "elsewhere", tmp_path / "project") == (tmp_path / "elsewhere").as_posix()


@pytest.mark.tools
@pytest.mark.parametrize("text, service", [(LIST_ENV, "vllm"), (LIST_ENV, "proxy"), (MAPPING_ENV, "vllm"), (MAPPING_ENV, "other")])
def test_add_is_idempotent_and_remove_restores_bytes(tmp_path, text, service):
    mounts = make_mounts()
    added = compose_edit.add_mounts(text, service, mounts)
    assert mounts.hotfix[0].spec in added.text and mounts.lock.spec in added.text
    for comment in [line.strip() for line in text.splitlines() if line.strip().startswith("#") or "  #" in line]:
        assert comment in added.text
    assert compose_edit.add_mounts(added.text, service, mounts).text == added.text
    removed = compose_edit.remove_mounts(added.text, service, mounts)
    assert removed.text == text
    path = tmp_path / "docker-compose.yml"
    path.write_text(added.text)
    validate(path)


def test_environment_style_is_respected():
    mounts = make_mounts()
    assert "      - HOTFIX_LOCK=/etc/vllm-hotfix/hotfix.lock\n" in compose_edit.add_mounts(LIST_ENV, "vllm", mounts).text
    assert "      HOTFIX_LOCK: /etc/vllm-hotfix/hotfix.lock\n" in compose_edit.add_mounts(MAPPING_ENV, "vllm", mounts).text


def test_comment_before_next_key_stays_before_it():
    added = compose_edit.add_mounts(LIST_ENV, "vllm", make_mounts()).text
    assert "hotfix.lock:ro\n    # environment follows\n    environment:\n" in added


def test_lock_mount_stays_while_other_hotfix_mounts_remain():
    mounts = make_mounts()
    other = compose_mounts.Mount("./hotfix-export/other-fix/vllm/a.py", f"{SITE}/vllm/a.py")
    both = compose_mounts.Mounts((*mounts.hotfix, other), mounts.lock, mounts.export_source)
    added = compose_edit.add_mounts(LIST_ENV, "vllm", both).text
    partly = compose_edit.remove_mounts(added, "vllm", mounts).text
    assert other.spec in partly and mounts.lock.spec in partly and "HOTFIX_LOCK" in partly
    assert mounts.hotfix[0].spec not in partly


@pytest.mark.tools
def test_override_file_holds_only_the_service_mounts(tmp_path):
    mounts = make_mounts()
    override = compose_edit.add_mounts("", "vllm", mounts, create_service=True).text
    assert override.startswith("services:\n  vllm:\n    volumes:\n      - ./hotfix-export/")
    base = tmp_path / "docker-compose.yml"
    base.write_text(LIST_ENV)
    over = tmp_path / "docker-compose.hotfix.yml"
    over.write_text(override)
    validate(base, over)
    emptied = compose_edit.remove_mounts(override, "vllm", mounts).text
    assert compose_edit.service_is_empty(emptied, "vllm", source="o.yml")


def test_unknown_service_lists_services():
    with pytest.raises(UsageError, match=r"no service 'vlm'; services: vllm, proxy"):
        compose_edit.add_mounts(LIST_ENV, "vlm", make_mounts())


def test_target_already_mounted_from_elsewhere_is_refused():
    mounts = make_mounts()
    clash = LIST_ENV.replace("      - ./models:/models:ro", f"      - ./old/{PATH}:{SITE}/{PATH}:ro\n      - ./models:/models:ro")
    with pytest.raises(Refused, match="already mounts"):
        compose_edit.add_mounts(clash, "vllm", mounts)


def test_remove_finds_our_mounts_by_source_whatever_the_container_path():
    in_image = make_mounts("/usr/lib/python3/dist-packages")
    assert in_image.hotfix[0].target.startswith("/usr/lib/python3/dist-packages/vllm/")
    added = compose_edit.add_mounts(LIST_ENV, "vllm", in_image).text
    assert compose_edit.remove_mounts(added, "vllm", make_mounts()).text == LIST_ENV
