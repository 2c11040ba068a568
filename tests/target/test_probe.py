import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_hotfix_guard.install import probe


@pytest.mark.parametrize("version", ["3.10", "3.12", "3.13"])
def test_probe_is_stdlib_only_runs_on_every_supported_python_and_ignores_cwd(other_python, version, tmp_path):
    python = other_python(version)
    source = Path(probe.__file__).read_text()
    (tmp_path / "overlay" / "json").mkdir(parents=True)
    (tmp_path / "overlay" / "json" / "__init__.py").write_text("print('side effect on stdout')\n")
    done = subprocess.run([python, "-c", source, "json", "--import"], capture_output=True, text=True,
                          check=True, cwd=tmp_path)
    assert len([x for x in done.stdout.splitlines() if x.startswith(probe.MARKER)]) == 1
    facts = probe.read_facts(done.stdout)
    assert facts["python_version"].startswith(version)
    assert facts["spec"]["origin"].endswith("json/__init__.py")
    assert facts["import"] == {"file": facts["spec"]["origin"], "error": None}
    assert str(tmp_path) not in facts["sys_path"] and "" not in facts["sys_path"]


def test_failed_import_is_one_line_and_stdout_of_the_package_is_kept_out(tmp_path):
    pkg = tmp_path / "noisy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("print('hello from import')\nimport not_installed_module_xyz\n")
    source = Path(probe.__file__).read_text()
    done = subprocess.run([sys.executable, "-c", source, "noisy", "--import"], capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": str(tmp_path)})
    facts = probe.read_facts(done.stdout)
    assert facts["import"] == {"file": None,
                               "error": "ModuleNotFoundError: No module named 'not_installed_module_xyz'"}
    assert facts["pythonpath"] == [str(tmp_path)]
    assert facts["copies"] == [{"entry": str(tmp_path), "path": str(pkg)}]
    assert "hello from import" in done.stderr


DIFFERENTIAL = r'''
import importlib.metadata, inspect, os, sys
sys.path.insert(0, sys.argv[1])
import probe
path = sys.path[1:]
del sys.path[0]
stdlib = importlib.metadata.packages_distributions()
norm = probe.dist_info_name
infos = [os.path.join(base or ".", name) for base in path for name, is_dir in probe._metadata_entries(base or ".") if is_dir]
checked, differ = 0, []
for key, names in sorted(stdlib.items()):
    providers = {probe._described(d, key)["name"] for d in infos if probe._provides(None, d, key) and probe._described(d, key)}
    chosen = [d["name"] for d in probe._distributions(key, path)]
    checked += 1
    if {norm(n) for n in names} != {norm(n) for n in providers} or len(chosen) != 1 or norm(chosen[0]) not in {norm(n) for n in names}:
        differ.append((key, sorted(names), sorted(providers), chosen))
print(repr((checked, differ)))
'''


def _differential(python: str) -> tuple[int, list]:
    """For every top-level name importlib.metadata.packages_distributions() knows in PYTHON's
    environment: does the probe's rule (``_provides``) name the same providers, and is the one its scan
    stops at (``_distributions``) one of them?"""
    import ast

    done = subprocess.run([python, "-c", DIFFERENTIAL, str(Path(probe.__file__).parent)],
                          capture_output=True, text=True, check=True)
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


def test_the_fast_distribution_reader_answers_what_importlib_metadata_answers_here():
    """This interpreter: the test venv, with vllm-hotfix itself installed editable (no RECORD entry
    for its package, a name-only match) and ~50 wheels with and without top_level.txt."""
    checked, differ = _differential(sys.executable)
    assert checked > 20 and differ == []


@pytest.mark.real
def test_the_fast_distribution_reader_on_a_real_vllm_install(vllm_template):
    """The real vLLM 0.30.0 wheel (installed alone): the facts a wheel target is built from."""
    checked, differ = _differential(str(vllm_template("0.30.0").python))
    assert checked >= 1 and differ == []
    facts = probe.read_facts(subprocess.run([str(vllm_template("0.30.0").python), "-c",
                                             Path(probe.__file__).read_text(), "vllm"],
                                            capture_output=True, text=True, check=True).stdout)
    (dist,) = facts["distributions"]
    assert (dist["name"], dist["version"], dist["has_record"], dist["record_lists_init"]) == ("vllm", "0.30.0", True, True)


def test_read_facts_takes_the_last_marker_line_and_refuses_anything_but_a_literal():
    assert probe.read_facts(f"{probe.MARKER}{{'a': 1}}\nnoise\n{probe.MARKER}{{'b': [None, True]}}\n") == {"b": [None, True]}
    assert probe.read_facts(f"{probe.MARKER}__import__('os').system('x')\n") is None
    assert probe.read_facts(f"{probe.MARKER}[1]\n") is None
    assert probe.read_facts("nothing\n") is None


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.vllm_full
def test_the_fast_distribution_reader_in_the_full_vllm_venv():
    """The real vLLM 0.30.0 with all its dependencies (torch, ~200 distributions, RECORDs of 100,000
    lines, wheels with and without top_level.txt): every one of its ~180 top-level names."""
    import realdata

    checked, differ = _differential(str(realdata.vllm_full_venv("0.30.0").python))
    assert checked > 150 and differ == []


def _dist_info(site: Path, name: str, version: str, record_lines: list[str], top_level: str | None = None) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n")
    (info / "RECORD").write_text("".join(f"{line},,\n" for line in record_lines))
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level)


def test_the_package_s_own_distribution_is_chosen_over_a_plugin_that_drops_files_into_it(tmp_path):
    """Two distributions beside the loaded copy both ship files of ``demo``: a vendor plugin that sorts
    first (its RECORD lists demo/extra.py) and demo's own wheel. The scan stops at demo's own (step 1 of
    ``_distributions``), and listing an entry that does not hold the package is never needed."""
    site, other = tmp_path / "site-packages", tmp_path / "elsewhere"
    (site / "demo").mkdir(parents=True)
    (site / "demo" / "__init__.py").write_text("")
    _dist_info(site, "aaa_vendor_plugin", "2.0", ["aaa_vendor_plugin/__init__.py", "demo/extra.py"])
    _dist_info(site, "demo", "1.0", ["demo/__init__.py", "demo/core.py"], top_level="demo\n")
    _dist_info(other, "demo", "0.9", ["demo/__init__.py"], top_level="demo\n")
    (dist,) = probe._distributions("demo", [str(other), str(site)], str(site / "demo"))
    assert (dist["name"], dist["version"], dist["record_lists_init"]) == ("demo", "1.0", True)
    # without its own wheel there, the plugin beside the package is still preferred to a copy elsewhere
    shutil.rmtree(site / "demo-1.0.dist-info")
    (dist,) = probe._distributions("demo", [str(other), str(site)], str(site / "demo"))
    assert dist["name"] == "aaa-vendor-plugin"
    # no provider at all beside it or elsewhere (an editable install): one named as the package
    shutil.rmtree(site / "aaa_vendor_plugin-2.0.dist-info")
    (other / "demo-0.9.dist-info" / "top_level.txt").write_text("something_else\n")
    (dist,) = probe._distributions("demo", [str(other), str(site)], str(site / "demo"))
    assert dist["version"] == "0.9"


def test_an_entry_holds_the_package_by_its_realpath_whatever_the_spelling(tmp_path):
    """Which sys.path entries hold the loaded copy is decided by realpath (a link to site-packages holds
    it; a missing entry, a file, and a sibling whose name is a prefix do not), whatever ruled an entry
    out first (one stat per entry, a realpath only for those that may hold it)."""
    site = tmp_path / "lib" / "site-packages"
    (site / "demo").mkdir(parents=True)
    (site / "demo" / "__init__.py").write_text("")
    _dist_info(site, "demo", "1.0", ["demo/__init__.py"], top_level="demo\n")
    sibling = tmp_path / "lib" / "site"  # a prefix of "site-packages" as a string, not as a directory
    _dist_info(sibling, "demo", "0.5", ["demo/__init__.py"], top_level="demo\n")
    (tmp_path / "link").symlink_to(site)
    (tmp_path / "a-file").write_text("")
    entries = [str(tmp_path / "missing"), str(tmp_path / "a-file"), str(sibling), str(tmp_path / "link")]
    (dist,) = probe._distributions("demo", entries, str(site / "demo"))
    assert (dist["version"], dist["dist_info"]) == ("1.0", str(tmp_path / "link" / "demo-1.0.dist-info"))
    (dist,) = probe._distributions("demo", entries[:3], str(site / "demo"))  # nothing holds it: first elsewhere
    assert dist["version"] == "0.5"
    (dist,) = probe._distributions("demo", [str(sibling), str(site / "..") + "/site-packages"], str(tmp_path / "link" / "demo"))
    assert dist["version"] == "1.0"


@pytest.mark.parametrize("text", [
    None, "", "Name: vllm\nVersion: 0.30.0\n\nName: not-this\n" + "x" * 5000,
    "Name: a\r\nVersion: 1\r\n\r\nVersion: 2\r\n",  # CRLF: no "\n\n", the whole text is split
    "Metadata-Version: 2.1\n   \nName: after-a-blank-line\n\n",  # a blank (spaces) line ends the block first
    "Version: 1\nName: b\n\n\n", "Name: c", "\nName: d\n",
])
def test_metadata_headers_reads_only_the_header_block_with_the_same_answer(tmp_path, text):
    """The answer of the rule that split the whole text (the probe as it was, tests/fixtures/probe_before_issue25.py)."""
    from fixtures import probe_before_issue25 as before

    assert probe.metadata_headers(text) == before.metadata_headers(text)
    info = tmp_path / "x-1.dist-info"
    info.mkdir()
    (info / "METADATA").write_bytes((text or "").encode())
    described = probe._described(str(info), "x")
    expected = before.metadata_headers(text)
    assert (described is None) == ("Name" not in expected)
    if described is not None:
        assert (described["name"], described["version"]) == (expected["Name"], expected.get("Version"))
