"""The guard's decisions without vLLM (fast): which processes strict mode stops, what it says about
broken state, one line per id, and the environments that would keep vLLM from loading it at all."""

from __future__ import annotations

import json
import os
import sys

import pytest

from vllm_hotfix_guard import plugin as guard, derive as guard_derive, env as guard_env, required as guard_required
from vllm_hotfix_guard.paths import TargetDir


@pytest.mark.parametrize("argv, serving", [
    (["/usr/bin/vllm", "--version"], False),
    (["/usr/bin/vllm", "--help"], False),
    (["/usr/bin/vllm", "serve", "--help"], False),
    (["/usr/bin/vllm", "collect-env"], False),
    (["/usr/bin/vllm"], False),
    (["/usr/bin/vllm", "serve", "/models/glm", "--port", "8000"], True),
    (["/usr/bin/vllm", "bench", "throughput"], True),
    (["/usr/bin/vllm", "some-new-subcommand"], True),  # unknown: it may serve, so strict stops it
    (["/app/run_llm.py", "--help"], True),  # a script using LLM(...): its flags are its own
    (["-c"], True),
])
def test_only_serving_processes_are_stopped(monkeypatch, argv, serving):
    monkeypatch.setattr(sys, "argv", argv)
    assert guard.serving_process() is serving


@pytest.mark.parametrize("value, problem", [
    ("vllm_hotfix_guard", None),
    ("lora,vllm_hotfix_guard", None),
    ("", "VLLM_PLUGINS='' leaves out vllm_hotfix_guard: vLLM will not load the guard"),
    ("lora", "VLLM_PLUGINS='lora' leaves out vllm_hotfix_guard"),
    (" vllm_hotfix_guard", "leaves out vllm_hotfix_guard (vLLM does not strip spaces: ' vllm_hotfix_guard' is not "
                           "'vllm_hotfix_guard')"),
])
def test_vllm_plugins_that_leave_the_guard_out_are_named(value, problem):
    problems = guard_env.environment_problems({"VLLM_PLUGINS": value})
    if problem is None:
        assert problems == []
    else:
        (found,) = problems
        assert problem in found


def test_a_guard_that_fails_to_import_is_named(tmp_path):
    """The facts the probe gathers in the interpreter that runs vLLM (install/probe.guard_facts), and the
    problems guard_env words from them."""
    from vllm_hotfix_guard.install import probe

    info = tmp_path / "broken_guard-1.0.dist-info"
    info.mkdir()
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{guard_env.PLUGIN_NAME} = "
                                           "vllm_hotfix_guard.plugin:no_such_name\n")
    facts = probe.guard_facts([str(tmp_path)])
    assert facts["entry_points"] == ["vllm_hotfix_guard.plugin:no_such_name"] and facts["loaded"]
    assert facts["load_error"].startswith("AttributeError:")
    assert probe.guard_facts([str(tmp_path)], load=False) == {"entry_points": facts["entry_points"], "load_error": None,
                                                              "loaded": False}
    (problem,) = guard_env.environment_problems({}, python="/venv/bin/python", entry_points=facts["entry_points"],
                                                load_error=facts["load_error"])
    assert problem.startswith("the guard fails to import in /venv/bin/python "
                              "(vllm_hotfix_guard.plugin:no_such_name): AttributeError:")
    assert probe.guard_facts([str(tmp_path / "nothing")]) == {"entry_points": [], "load_error": None, "loaded": False}
    (problem,) = guard_env.environment_problems({}, python="/venv/bin/python", entry_points=[])
    assert problem.startswith("no vllm.general_plugins entry point vllm_hotfix_guard in /venv/bin/python")
    assert guard_env.environment_problems({}, python="/venv/bin/python") == []  # entry points not known


def test_guard_entry_points_are_what_importlib_metadata_gives_vllms_loader(tmp_path):
    """The fast reader against the stdlib's entry_points(group=...) (what vLLM's loader calls), on this
    interpreter's sys.path plus a directory with a second, differently spelled declaration."""
    from importlib.metadata import distributions

    extra = tmp_path / "other_dist-1.0.dist-info"
    extra.mkdir()
    (extra / "METADATA").write_text("Metadata-Version: 2.1\nName: other-dist\nVersion: 1.0\n")
    (extra / "entry_points.txt").write_text(f"[console_scripts]\n{guard_env.PLUGIN_NAME} = no:thing\n\n"
                                            f"[vllm.general_plugins]\n  {guard_env.PLUGIN_NAME}=other.mod:fn  \n"
                                            f"[ vllm.general_plugins ]\n{guard_env.PLUGIN_NAME} = spaced:out\n")
    path = [*sys.path, str(tmp_path)]
    stdlib = [ep.value for ep in distributions(path=path) for ep in ep.entry_points
              if ep.group == guard_env.PLUGIN_GROUP and ep.name == guard_env.PLUGIN_NAME]
    assert guard_env.guard_entry_points(path) == stdlib
    assert stdlib[-1] == "other.mod:fn" and stdlib[0] == "vllm_hotfix_guard:register"


@pytest.mark.parametrize("value, code", [(None, 0), ("vllm_hotfix_guard", 0), ("", 1), (" vllm_hotfix_guard", 1)])
def test_check_env_command(run_hotfix, tmp_path, value, code):
    """hotfix's own interpreter runs vLLM here (a stand-in vllm on PYTHONPATH): its entry points are read."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "VLLM_PLUGINS"}
    if value is not None:
        env["VLLM_PLUGINS"] = value
    env["HOTFIX_LOCK"] = "/etc/vllm-hotfix/hotfix.lock"
    env["PYTHONPATH"] = str(tmp_path)
    result = run_hotfix("guard", "--check-env", env=env)
    assert result.returncode == code, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("ok: vLLM will load vllm_hotfix_guard" if code == 0 else "NOT IN EFFECT: guard: VLLM_PLUGINS=")
    assert "guard: checks HOTFIX_LOCK" in result.stdout
    as_json = run_hotfix("guard", "--check-env", "--json", env=env)
    assert as_json.returncode == code
    doc = json.loads(as_json.stdout)
    assert doc["ok"] is (code == 0) and doc["python"] == sys.executable and doc["checks"] == ["HOTFIX_LOCK"]
    assert doc["entry_points"][0] == "vllm_hotfix_guard:register" and len(doc["problems"]) == 1 - (code == 0)


def test_check_env_asks_the_interpreter_that_runs_vllm_not_its_own(run_hotfix, tmp_path):
    """With neither --python nor a vllm that hotfix's own interpreter imports: the refusal of every command."""
    result = run_hotfix("guard", "--check-env", "--json", env={"PATH": str(tmp_path)})
    assert result.returncode == 3 and "package vllm is not importable by" in json.loads(result.stdout)["error"]["message"]


def test_guard_needs_print_env_or_check_env(run_hotfix):
    result = run_hotfix("guard")
    assert result.returncode == 2 and "give --print-env, --check-env or --build-dist DIR" in result.stderr


def _state(tmp_path, monkeypatch):
    monkeypatch.setenv("HOTFIX_STATE_DIR", str(tmp_path / "state"))
    directory = TargetDir.of(tmp_path / "site").directory
    directory.mkdir(parents=True)
    return directory / "state.json"


def test_corrupt_state_is_named_not_reported_as_never_applied(tmp_path, monkeypatch):
    state = _state(tmp_path, monkeypatch)
    state.write_text('{"schema": 1, "hotfixes": ')
    (verdict,) = guard.check(lock=None, require=("mamba-align-block-size",))
    assert not verdict.in_effect
    assert verdict.detail.startswith(f"unknown: cannot read the recorded state: {state}:1: not JSON: ")
    assert "apply it" not in verdict.remedy and "permissions" in verdict.remedy


def test_unreadable_state_file_and_folder_are_named(tmp_path, monkeypatch):
    state = _state(tmp_path, monkeypatch)
    state.mkdir()  # not a regular file: the one reader of records refuses it (a FIFO or device the same)
    (verdict,) = guard.check(lock=None, require=("x",))
    assert verdict.detail == (f"unknown: cannot read the recorded state: {state}: not a regular file; "
                              "a file vllm-hotfix writes must be one")

    real_listdir = os.listdir

    def denied(path):
        if str(path).endswith("targets"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", denied)
    (verdict,) = guard.check(lock=None, require=("x",))
    assert verdict.detail == (f"unknown: cannot read the recorded state: {tmp_path / 'state' / 'targets'}: cannot list "
                              "the recorded targets: Permission denied")  # paths.all_target_dirs, the one lister


def test_each_id_once_with_its_sources(monkeypatch):
    lock = [(guard.Verdict("a", True, source="lock"), None), (guard.Verdict("b", True, source="lock"), None)]
    required = [(guard.Verdict("a", False, "lost: /x has sha256 1", "re-apply", "require"), None)]
    monkeypatch.setattr(guard_derive, "check_lock", lambda path, data=None: (lock, []))
    monkeypatch.setattr(guard_required, "check_required_ids", lambda ids: (required, []))
    verdicts = guard.check(lock="/l", require=("a",))
    assert [(v.hotfix_id, v.in_effect, v.source) for v in verdicts] == [("a", False, "lock+require"), ("b", True, "lock")]
    line = guard.summary_line(verdicts, "hf1-none")
    assert line.endswith(": a [lock+require] NOT IN EFFECT: lost: /x has sha256 1 -> re-apply; b [lock] in effect")
    assert line.count(" a [") == 1


def test_verify_lock_reports_a_vllm_plugins_that_turns_the_guard_off(run_hotfix, tmp_path):
    import hashlib

    import click
    from importlib.metadata import version

    from fixtures.codenames import code_of

    core = os.path.join(os.path.dirname(click.__file__), "core.py")
    sha = hashlib.sha256(open(core, "rb").read()).hexdigest()
    lock = tmp_path / "hotfix.lock"
    lock.write_text(json.dumps({"schema": 1, "site_packages": "/x", "hotfixes": [
        {"id": "a", "version": 1, "distribution": "click", "package": "click", "baseline_version": version("click"),
         "fixed_in": None, "files": [{"path": "click/core.py", "sha256": sha, "baseline_sha256": None,
                                      "export": "a/click/core.py",
                                      "code": code_of("click/core.py", b"", open(core, "rb").read())}]}]}))
    result = run_hotfix("verify", env={"HOTFIX_LOCK": str(lock)})
    assert result.returncode == 0, result.stdout + result.stderr  # the files are in effect, the guard loads
    result = run_hotfix("verify", env={"HOTFIX_LOCK": str(lock), "VLLM_PLUGINS": "lora"})
    assert result.returncode == 1
    assert result.stdout.splitlines()[0].startswith("in effect: a@1")
    assert "NOT IN EFFECT: guard: VLLM_PLUGINS='lora' leaves out vllm_hotfix_guard" in result.stdout


@pytest.fixture
def watched_package(tmp_path, monkeypatch):
    """pkg/m.py patched on disk, with a stale pyc of the original beside it (same size and mtime)."""
    import compileall
    import hashlib

    from vllm_hotfix_guard import imports as guard_imports

    package = tmp_path / "hotfixpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    module = package / "m.py"
    module.write_text("VALUE = 'original'\n")
    stat = module.stat()
    compileall.compile_file(str(module), quiet=1)
    module.write_text("VALUE = 'patched!'\n")  # same size
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime: Python would run the stale pyc
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(guard_imports, "_finder", None)
    saved_meta_path = list(sys.meta_path)
    yield module, hashlib.sha256(module.read_bytes()).hexdigest()
    sys.meta_path[:] = saved_meta_path
    for name in ("hotfixpkg", "hotfixpkg.m"):
        sys.modules.pop(name, None)
        guard_imports._verified.pop(name, None)


def test_import_watch_runs_the_checked_source_not_a_stale_pyc(watched_package, caplog):
    import importlib

    from vllm_hotfix_guard import imports as guard_imports

    caplog.set_level("INFO", logger=guard.LOGGER_NAME)
    module, sha = watched_package
    assert guard_imports.watch([guard.Watched("hotfixpkg.m", "h", str(module), sha)]) == ()
    assert importlib.import_module("hotfixpkg.m").VALUE == "patched!"
    (line,) = [r.getMessage() for r in caplog.records if "module hotfixpkg.m" in r.getMessage()]
    assert f"module hotfixpkg.m from {module}: the patched source of h (sha256 {sha[:12]}), compiled from source" in line
    import json as unwatched  # any other import: not ours
    assert unwatched.__spec__.loader.__class__.__name__ != "_CheckedLoader"


def test_import_watch_names_a_mismatch_and_strict_stops(watched_package, caplog, monkeypatch):
    import importlib

    from vllm_hotfix_guard import imports as guard_imports

    module, _ = watched_package
    guard_imports.watch([guard.Watched("hotfixpkg.m", "h", str(module), "f" * 64)])
    monkeypatch.setenv("HOTFIX_STRICT", "1")
    with pytest.raises(guard.HotfixNotInEffect, match=r"module hotfixpkg.m from .*m.py: sha256 \w+, expected the patched ffff"):
        importlib.import_module("hotfixpkg.m")
    assert any("module hotfixpkg.m from" in r.getMessage() and "h NOT IN EFFECT: sha256" in r.getMessage()
               for r in caplog.records if r.levelname == "ERROR")


def test_a_module_imported_before_the_guard_ran_is_not_taken_on_trust(watched_package):
    import importlib

    from vllm_hotfix_guard import imports as guard_imports

    module, sha = watched_package
    assert importlib.import_module("hotfixpkg.m").VALUE == "original"  # the stale pyc: what the watch prevents
    (verdict,) = guard_imports.watch([guard.Watched("hotfixpkg.m", "h", str(module), sha)])
    assert not verdict.in_effect and verdict.detail.startswith("unknown: module hotfixpkg.m was imported before the guard ran")


def test_an_entry_points_file_that_is_not_utf8_is_read_not_fatal(tmp_path):
    """A distribution elsewhere on sys.path with latin-1 bytes in its entry_points.txt must not make
    `verify --lock` or `guard --check-env` fail: its lines are still read."""
    info = tmp_path / "odd-1.0.dist-info"
    info.mkdir()
    (info / "entry_points.txt").write_bytes(b"[vllm.general_plugins]\n# caf\xe9\n"
                                            + guard_env.PLUGIN_NAME.encode() + b" = odd.mod:fn\n")
    assert guard_env.guard_entry_points([str(tmp_path)]) == ["odd.mod:fn"]


@pytest.mark.parametrize("value", [" , ", ","])
def test_a_blank_requirement_is_refused_not_an_empty_pass(value, run_hotfix, tmp_path, monkeypatch):
    """HOTFIX_REQUIRE=" , " named no id: the guard checked nothing and said nothing was wrong in every process.
    Now the guard judges it invalid (NOT IN EFFECT; strict mode stops the process) and --check-env refuses it."""
    from vllm_hotfix_guard import plugin
    from vllm_hotfix_guard.settings import required_ids

    assert required_ids(value) == ("",) and required_ids("") == () and required_ids(" a , b,a") == ("a", "b")
    (verdict,) = plugin.check(lock=None, require=required_ids(value))
    assert not verdict.in_effect and verdict.detail.startswith("invalid: HOTFIX_REQUIRE names no hotfix id")
    monkeypatch.setenv("HOTFIX_REQUIRE", value)
    monkeypatch.setenv("HOTFIX_STRICT", "1")
    monkeypatch.setattr(plugin, "serving_process", lambda: True)
    with pytest.raises(plugin.HotfixNotInEffect, match="HOTFIX_REQUIRE names no hotfix id"):
        plugin.register()
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_PLUGINS", "HOTFIX_STRICT")}
    env.update(HOTFIX_REQUIRE=value, PYTHONPATH=str(tmp_path))
    result = run_hotfix("guard", "--check-env", env=env)
    assert result.returncode == 1 and result.stdout.startswith(f"NOT IN EFFECT: guard: HOTFIX_REQUIRE=\"{value}\" names "
                                                               "no hotfix id"), result.stdout + result.stderr


def test_the_readiness_record_follows_a_mismatch_found_after_register(watched_package, tmp_path, monkeypatch, capsys):
    """Issue 43: a NOT IN EFFECT found after register() (here the import watch: a patched module imported from
    other bytes) never reached the process's readiness record, so `ready` said ready. Now the record follows
    it, and a later check that passes does not make the process ready again."""
    import importlib

    from vllm_hotfix_guard import imports as guard_imports, ready, ready_probe

    where = tmp_path / "ready"
    where.mkdir(mode=0o700)
    monkeypatch.setenv("HOTFIX_READY_DIR", str(where))
    monkeypatch.delenv("HOTFIX_STRICT", raising=False)
    monkeypatch.delenv("HOTFIX_LOCK", raising=False)
    monkeypatch.setattr(ready, "_this", {})
    module, _ = watched_package
    ready.record([], role="main (vllm serve)")  # register(): all in effect
    assert ready_probe.main(["--expect", "api=1"]) == 0
    guard_imports.watch([guard.Watched("hotfixpkg.m", "h", str(module), "f" * 64)])
    importlib.import_module("hotfixpkg.m")  # other bytes than the lock's: NOT IN EFFECT, logged
    capsys.readouterr()
    assert ready_probe.main(["--expect", "api=1"]) == 1
    assert 'NOT IN EFFECT: "h"' in capsys.readouterr().out
    ready.record([], role="main (vllm serve)")  # a later check that passes: still failed
    assert ready_probe.main(["--expect", "api=1"]) == 1
