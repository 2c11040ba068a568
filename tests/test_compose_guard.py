"""`hotfix compose` and the guard (issue 43): the rule `hotfix k8s` follows, from the same function
(txn/exported.refuse_missing_guard). An export without guard/ is refused, exit 3, one line and its hint,
every file byte-identical, strict or not; the hint's command runs as pasted and is the opt-out: --no-guard,
the image has vllm-hotfix-guard installed itself, and --no-strict (strict mode, the default, would stop
nothing). --no-guard with an export that carries the guard is a usage error (exit 2). --remove takes the
mounts out of any export: removing never needs the guard."""

from __future__ import annotations

import json
import shlex

import pytest

from fixtures.composefiles import HOTFIX, LIST_ENV, write_export
from fixtures.trees import snapshot

HINT = "hotfix: hint: "


@pytest.fixture
def project(tmp_path):
    write_export(tmp_path / "hotfix-export")  # patched file + hotfix.lock, no guard/
    (tmp_path / "docker-compose.yml").write_text(LIST_ENV)
    return tmp_path


def compose(run_hotfix, project, *args, env=None):
    return run_hotfix("compose", HOTFIX, "--service", "vllm", "--export-dir", "hotfix-export", *args, cwd=project,
                      env=env)


def pasted(done) -> tuple[dict, list[str]]:
    """The command at the end of the refusal's hint, as a shell would run it: (its environment, hotfix's args)."""
    hint = done.stderr.splitlines()[-1]
    assert hint.startswith(HINT), done.stderr
    words = shlex.split(hint.rsplit(": ", 1)[1])
    env = dict(w.split("=", 1) for w in words[:words.index("hotfix")])
    return env, words[words.index("hotfix") + 1:]


@pytest.mark.parametrize("extra", [(), ("--dry-run",), ("--json",), ("--override", "compose.hotfix.yml")])
def test_an_export_without_the_guard_is_refused_and_the_hint_runs_as_pasted(project, run_hotfix, extra):
    before = snapshot(project)
    done = compose(run_hotfix, project, *extra)
    assert done.returncode == 3, done.stderr
    if "--json" in extra:  # the error as one JSON document too
        assert json.loads(done.stdout)["error"]["kind"] == "Refused"
    else:
        assert done.stdout == ""
    error, hint = done.stderr.splitlines()  # one line and its hint
    assert error == ("hotfix: error: hotfix-export carries no guard: in a stock image nothing would check the "
                     "mounted files, and the readiness check could not run")
    assert "re-run `hotfix export` into it" in hint and hint.endswith(" --no-guard --no-strict")
    assert snapshot(project) == before
    env, args = pasted(done)
    assert env == {} and args[:2] == ["compose", HOTFIX] and args[-2:] == ["--no-guard", "--no-strict"]
    again = run_hotfix(*args, cwd=project / "hotfix-export")  # from another directory: paths came back absolute
    assert again.returncode == 0, again.stderr
    if "--dry-run" in extra:
        assert snapshot(project) == before
    else:
        written = project / ("compose.hotfix.yml" if "--override" in extra else "docker-compose.yml")
        assert "HOTFIX_LOCK" in written.read_text()


@pytest.mark.parametrize("given", [(), ("--strict",)])  # strict mode: the default, as `hotfix k8s`'s
def test_strict_mode_refuses_the_opt_out_and_the_hint_turns_it_off(project, run_hotfix, given):
    before = snapshot(project)
    done = compose(run_hotfix, project, "--no-guard", *given)
    assert done.returncode == 3 and len(done.stderr.splitlines()) == 2, done.stderr
    assert "strict mode would stop nothing" in done.stderr and snapshot(project) == before
    env, args = pasted(done)
    assert env == {} and args[-1] == "--no-strict" and "--no-guard" in args
    again = run_hotfix(*args, cwd=project)
    assert again.returncode == 0, again.stderr
    text = (project / "docker-compose.yml").read_text()
    assert "HOTFIX_LOCK" in text and "HOTFIX_STRICT" not in text  # --no-strict writes none
    done = compose(run_hotfix, project, "--no-guard", "--no-strict", env={"HOTFIX_STRICT": "1"})  # the option decides
    assert done.returncode == 0 and done.stdout.endswith("nothing changed\n"), done.stderr


def test_the_service_s_own_strict_mode_is_not_turned_off_by_the_opt_out(project, run_hotfix):
    """--no-guard --no-strict where the service sets HOTFIX_STRICT=1 itself: the file and the option disagree,
    so nothing is written (exit 3), as strict mode would stop nothing in an image without the guard."""
    compose_file = project / "docker-compose.yml"
    compose_file.write_text(LIST_ENV.replace("      - NCCL_DEBUG=WARN\n", "      - NCCL_DEBUG=WARN\n      - HOTFIX_STRICT=1\n"))
    before = snapshot(project)
    done = compose(run_hotfix, project, "--no-guard", "--no-strict")
    assert done.returncode == 3 and snapshot(project) == before, done.stderr
    assert done.stderr.splitlines()[0].endswith("services.vllm.environment sets HOTFIX_STRICT=1, strict mode, and this "
                                                 "is --no-strict: not edited"), done.stderr


def test_no_guard_with_an_export_that_carries_it_is_a_usage_error(tmp_path, run_hotfix):
    from fixtures.kube import make_export

    make_export(tmp_path / "hotfix-export")  # with the guard's tree, named by its lock
    (tmp_path / "docker-compose.yml").write_text(LIST_ENV)
    before = snapshot(tmp_path)
    done = run_hotfix("compose", "--service", "vllm", "--no-guard", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "hotfix: error: --no-guard: hotfix-export carries the guard, which is mounted with the files",
        "hotfix: hint: drop --no-guard"], done.stderr
    assert snapshot(tmp_path) == before
    assert run_hotfix("compose", "--service", "vllm", cwd=tmp_path).returncode == 0
    assert "vllm_hotfix_guard:" in (tmp_path / "docker-compose.yml").read_text()
    removed = run_hotfix("compose", "--service", "vllm", "--remove", "--no-guard", cwd=tmp_path)  # the same line
    assert removed.returncode == 0, removed.stderr
    assert snapshot(tmp_path) == before


def test_remove_takes_the_mounts_out_of_an_export_without_the_guard(project, run_hotfix):
    assert compose(run_hotfix, project, "--no-guard", "--no-strict").returncode == 0
    for extra in ((), ("--no-guard",)):  # with or without the opt-out
        written = (project / "docker-compose.yml").read_text()
        assert "HOTFIX_LOCK" in written
        done = compose(run_hotfix, project, "--remove", *extra, env={"HOTFIX_STRICT": "1"})
        assert done.returncode == 0, done.stderr
        assert (project / "docker-compose.yml").read_text() == LIST_ENV
        (project / "docker-compose.yml").write_text(written)
