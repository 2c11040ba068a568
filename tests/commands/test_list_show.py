"""`hotfix list` and `hotfix show` through the real CLI, on a test catalog built in tmp_path."""

from __future__ import annotations

import json

import pytest

from fixtures.manifests import MD5, SHA, manifest_data, write_manifest
from fixtures.terminal import on_terminal


@pytest.fixture
def catalog(tmp_path):
    root = tmp_path / "catalog"
    for version in (1, 2):
        write_manifest(root, manifest_data(id="demo-fix", version=version, supersedes=[1] if version == 2 else []),
                       name=f"demo-fix-v{version}")
    external = manifest_data(id="qwen-big", version=6, supersedes=[5], fixed_in={"commit": "abcdef12", "repo": "https://x/vllm-ascend"},
                             targets=[{"distribution": "vllm-ascend", "git": {"tag": "v0.26.0rc1"}}])
    external["patches"] = [{"external": "big.patch", "url": "https://example.com/big.patch", "md5": MD5, "sha256": SHA,
                            "stats": {"files": 135, "insertions": 27358, "deletions": 248}}]
    write_manifest(root, external)
    return root


def test_list_shows_the_latest_version_of_each_hotfix(run_hotfix, catalog):
    lines = on_terminal("list", "--catalog", catalog, columns=1000)  # wide enough for any tmp_path
    assert lines[0].split() == ["ID", "VERSION", "TARGET", "FIXED", "IN", "FROM", "TITLE"]
    demo = next(line for line in lines if line.startswith("demo-fix "))
    assert demo.split()[:5] == ["demo-fix", "2", "vllm", ">=0.29.0,<0.32.0", "0.32.0"]
    assert any(line.startswith("qwen-big ") and "vllm-ascend (git tag v0.26.0rc1)" in line for line in lines)
    assert "older versions: demo-fix 1 (hotfix show ID@VERSION)" in "\n".join(lines)


def test_list_into_a_pipe_is_one_tab_separated_line_per_hotfix(run_hotfix, catalog):
    # into a real pipe (process=True), whatever COLUMNS says
    result = run_hotfix("list", "--catalog", catalog, env={"COLUMNS": "60"}, process=True)
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    ids = [e["id"] for e in json.loads(run_hotfix("list", "--catalog", catalog, "--json").stdout) if e["latest"]]
    assert [row[0] for row in rows] == ids and {len(row) for row in rows} == {6}  # no header, no footer
    demo = next(row for row in rows if row[0] == "demo-fix")
    assert demo[:5] == ["demo-fix", "2", "vllm >=0.29.0,<0.32.0", "0.32.0", str(catalog)]
    qwen = next(row for row in rows if row[0] == "qwen-big")
    assert qwen[2] == "vllm-ascend (git tag v0.26.0rc1)" and qwen[5] == "Demo fix"


def test_list_json_has_every_version(run_hotfix, catalog):
    result = run_hotfix("list", "--json", env={"HOTFIX_CATALOG": str(catalog)})
    assert result.returncode == 0, result.stderr
    entries = {(e["id"], e["version"]): e for e in json.loads(result.stdout)}
    assert entries[("demo-fix", 1)]["latest"] is False
    assert entries[("demo-fix", 2)]["latest"] is True
    assert entries[("demo-fix", 2)]["targets"] == [{"distribution": "vllm", "package": "vllm", "versions": ">=0.29.0,<0.32.0", "git": None}]
    assert entries[("qwen-big", 6)]["fixed_in"] == {"version": None, "commit": "abcdef12", "repo": "https://x/vllm-ascend"}


def test_show_tells_symptoms_patches_pins_and_where_to_get_the_file(run_hotfix, catalog):
    result = run_hotfix("show", "qwen-big", "--catalog", catalog)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("qwen-big (version 6): Demo fix\n")
    for expected in ("  - CUDA error: an illegal memory access was encountered",
                     "big.patch: distributed separately, get it from https://example.com/big.patch and pass --patch-file PATH",
                     f"md5     {MD5}", f"sha256  {SHA}", "stats   135 files +27358/-248",
                     "vllm-ascend (git tag v0.26.0rc1) (import vllm_ascend)",
                     "Fixed upstream in: https://x/vllm-ascend@abcdef12",
                     "vllm checkout: commit 568afb3a, clean (usually /vllm-workspace/vllm)",
                     "vllm/x.py contains 'new'", "Supersedes (fully replaces) versions: 5",
                     "[pr] https://github.com/vllm-project/vllm/pull/1 the fix",
                     f"Try it: hotfix apply qwen-big --catalog {catalog} --root CHECKOUT --dry-run --patch-file PATH"):
        assert expected in out
    assert "\\n" not in out and "None" not in out  # issue 45: no literal \n, no `sha256  None`


def test_show_an_older_version_and_json(run_hotfix, catalog):
    text = run_hotfix("show", "demo-fix@1", "--catalog", catalog)
    assert text.returncode == 0, text.stderr
    assert "Other versions: 2 (hotfix show demo-fix@VERSION)" in text.stdout
    assert "for versions >=0.29.0,<0.30.0" in text.stdout
    result = run_hotfix("show", "demo-fix", "--json", "--catalog", catalog)
    data = json.loads(result.stdout)
    assert (data["id"], data["version"], data["latest"], data["versions"]) == ("demo-fix", 2, True, [1, 2])
    assert data["patches"][0]["path"] == str(catalog / "patches" / "demo-fix" / "0.29.patch")
    assert data["patches"][0]["stats"] == {"files": 1, "insertions": 1, "deletions": 1}
    assert data["patches"][2]["kind"] == "commit" and data["patches"][2]["path"] is None
    assert data["requires"][0]["git"]["clean"] is True
    assert data["checks"] == [{"file": "vllm/x.py", "contains": "new", "not_contains": None, "description": None}]


def test_show_unknown_id_is_refused_with_a_suggestion(run_hotfix, catalog):
    result = run_hotfix("show", "demo-fx", "--catalog", catalog)
    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "hotfix: error: unknown hotfix 'demo-fx'",
        "hotfix: hint: did you mean 'demo-fix'? `hotfix list` shows the catalog; add yours with --catalog DIR or HOTFIX_CATALOG",
    ]
    as_json = run_hotfix("show", "demo-fx", "--json", "--catalog", catalog)
    assert json.loads(as_json.stdout)["error"]["kind"] == "Refused"


def test_a_broken_manifest_is_one_line_naming_file_and_key(run_hotfix, catalog):
    path = catalog / "manifests" / "broken.toml"
    path.write_text('schema = 1\nid = "broken"\nversion = 1\ntitle = "x"\ntargets = [{distribution = "vllm", versions = ">=0.29"}]\n'
                    'patches = [{file = "a.patch", sha256 = "abc"}]\n')
    result = run_hotfix("list", env={"HOTFIX_CATALOG": str(catalog)})
    assert result.returncode == 8
    assert result.stderr == f"hotfix: error: {path}: patches[0].sha256: expected 64 hex characters\n"
    path.write_text('schema = 1\nid = "broken\n')
    result = run_hotfix("show", "demo-fix", "--catalog", catalog)
    assert result.returncode == 8
    assert result.stderr.startswith(f"hotfix: error: {path}: line 2, column ")
    assert "Traceback" not in result.stderr


def test_builtin_catalog_lists_without_options(run_hotfix):
    result = run_hotfix("list", "--json")
    assert result.returncode == 0, result.stderr
    for entry in json.loads(result.stdout):
        shown = run_hotfix("show", f"{entry['id']}@{entry['version']}")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.startswith(f"{entry['id']} (version {entry['version']}): ")


def _words(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize("columns", [60, 80, 120, 200])
def test_list_fits_the_terminal_width_and_keeps_every_word(run_hotfix, columns):
    whole = run_hotfix("list")  # a pipe: one line per hotfix, for grep
    assert whole.returncode == 0, whole.stderr
    rows = whole.stdout.splitlines()
    assert max(len(line) for line in rows) > 200  # the built-in titles are long
    fitted = on_terminal("list", columns=columns)  # COLUMNS wins over the terminal's own width, as in pip
    assert all(len(line) <= columns for line in fitted), fitted
    assert set(_words(whole.stdout)) <= set(_words("\n".join(fitted)))  # wrapped, nothing cut


def test_list_on_a_real_terminal_fits_its_width(run_hotfix, tmp_path):
    lines = on_terminal("list", cols=72)
    assert lines and all(len(line) <= 72 for line in lines), lines
    assert any("mamba-align-block-size" in line for line in lines)
