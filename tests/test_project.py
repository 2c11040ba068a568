"""The project's own promises: README commands, CLI entry points, help."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", setup, re.S)


def test_readme_has_exactly_two_setup_commands():
    assert len(_readme_commands()) == 2


def test_ci_runs_the_readme_test_command():
    test_command = _readme_commands()[1].strip()
    ci = (REPO / ".ci" / "run").read_text()
    assert test_command in ci.splitlines()


def test_version_and_help_list_every_command():
    out = subprocess.run([sys.executable, "-m", "vllm_hotfix", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for name in ("apply", "status", "log", "verify", "rollback", "recover", "where", "audit", "list", "show",
                 "new", "check-catalog", "port", "contains", "export", "compose", "guard", "k8s", "pack", "bake"):
        assert re.search(rf"^\s+{re.escape(name)}\s+\S", out.stdout, re.M), name
    assert "Exit codes" in out.stdout
    ver = subprocess.run([sys.executable, "-m", "vllm_hotfix", "--version"], capture_output=True, text=True)
    assert ver.returncode == 0 and re.search(r"\d+\.\d+\.\d+", ver.stdout)


def test_usage_error_is_one_line_exit_2():
    out = subprocess.run([sys.executable, "-m", "vllm_hotfix", "apply", "--bogus"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr


def test_imports_run_one_way():
    """The layer contract in .importlinter (its name lists the layers; tests/test_layers.py checks that it
    is the code's own order; the guard, the probe and core.verdict import no third-party package), checked
    by import-linter itself."""
    linter = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(linter), "--no-cache"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert "0 broken" in done.stdout


def test_no_command_swallows_unknown_options():
    """Explicit dispatch: every command's run() takes explicit keywords, so a renamed click option is a
    TypeError in the tests, never a silent default."""
    import ast

    for module in sorted((REPO / "src" / "vllm_hotfix" / "commands").glob("*.py")):
        tree = ast.parse(module.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == "run":
                assert node.args.kwarg is None, f"{module.name}: run(**{node.args.kwarg.arg})"
    cli = (REPO / "src" / "vllm_hotfix" / "cli.py").read_text()
    assert "import_module" not in cli and "**options" not in cli


# The size rules (400 lines a file, 80 a function) are tests/test_sizes.py's.


def test_every_dataclass_has_a_docstring():
    """Without one, @dataclass builds ``__doc__`` with inspect.signature when the class is created: ~0.1 ms
    a class, paid by the guard in every vLLM process and by every command at start."""
    import ast

    missing = []
    for path in sorted((REPO / "src").rglob("*.py")):  # both packages
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not ast.get_docstring(node) and \
                    any("dataclass" in ast.unparse(d) for d in node.decorator_list):
                missing.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}")
    assert missing == []


def test_the_wheel_carries_the_top_level_catalog(tmp_path):
    """manifests/ and patches/ live at the top of the repository and are shipped inside the wheel."""
    import zipfile

    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "--disable-pip-version-check",
                    str(REPO), "-w", str(tmp_path)], check=True)
    (wheel,) = tmp_path.glob("vllm_hotfix-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for manifest in (REPO / "manifests").glob("*.toml"):
        assert f"vllm_hotfix/_catalog/manifests/{manifest.name}" in names
    for patch in (REPO / "patches").rglob("*.patch"):
        assert f"vllm_hotfix/_catalog/patches/{patch.relative_to(REPO / 'patches').as_posix()}" in names
    # The guard package ships twice, the same files: in this wheel, and alone as vllm-hotfix-guard (the folder
    # zipped verbatim by containers/guard_dist.py); one entry point, the guard package's cheap register().
    from vllm_hotfix.containers import guard_dist

    with zipfile.ZipFile(wheel) as archive:
        ours = {n: archive.read(n) for n in names if n.startswith("vllm_hotfix_guard/")}
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert "[vllm.general_plugins]\nvllm_hotfix_guard = vllm_hotfix_guard:register\n" in \
            archive.read(entry_points).decode()
    standalone = {rel: data for rel, data in guard_dist.current().files if rel.startswith("vllm_hotfix_guard/")}
    assert ours == standalone


def test_no_module_imports_another_modules_private_name():
    """A name with a leading underscore is the module's own: no other module of the package imports it."""
    import ast

    found = []
    for module in (REPO / "src").rglob("*.py"):  # both packages
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vllm_hotfix"):
                found += [f"{module.relative_to(REPO)}:{node.lineno} {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == []


def test_the_state_folder_names_are_spelled_once_in_paths():
    """paths.TargetDir owns a target's state folder: the names of its files appear in paths.py alone."""
    import ast

    names = {"state.json", "journal.json", "history.jsonl", "history.1.jsonl", "gone.json"}
    spelled = []
    for path in sorted((REPO / "src").rglob("*.py")):  # both packages
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names:
                spelled.append(f"{path.relative_to(REPO / 'src').as_posix()}:{node.value}")
    assert sorted(spelled) == sorted(f"vllm_hotfix_guard/paths.py:{name}" for name in names)
