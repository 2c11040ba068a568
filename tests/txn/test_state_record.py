"""txn.state's writer: the record's JSON is what ``dataclasses.asdict`` gives, and it reads back."""

from __future__ import annotations

import dataclasses
import json

from vllm_hotfix_guard.txn.state import RecordedFile, RecordedHotfix, TargetState

HOTFIX = RecordedHotfix(
    id="mamba-align-block-size", version=2, applied_at="2026-12-01T00:00:00Z", source="catalog",
    patches=("patches/mamba-align-block-size/0001.patch", "patches/mamba-align-block-size/0002.patch"),
    files=tuple(RecordedFile(f"vllm/m{i}.py", None if i == 0 else "a" * 64, "b" * 64) for i in range(3)),
    strip=(1, 1), exclude=((), ("tests/*",)), backups="backups/mamba-align-block-size", package="vllm",
    backup_names="flat")


def test_to_json_is_asdict():
    assert HOTFIX.to_json() == dataclasses.asdict(HOTFIX)
    assert json.dumps(HOTFIX.to_json()) == json.dumps(dataclasses.asdict(HOTFIX))


def test_the_record_reads_back(tmp_path):
    directory = tmp_path / "target"
    directory.mkdir(mode=0o700)
    state = TargetState(directory, {"root": str(tmp_path / "site"), "package": "vllm"}, {HOTFIX.id: HOTFIX})
    state.path.write_bytes(state.to_bytes())
    again = TargetState.load(directory)
    assert again.hotfixes == {HOTFIX.id: HOTFIX}
    assert again.to_bytes() == state.to_bytes()
