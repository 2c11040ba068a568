"""`hotfix COMMAND --help`: every command shows an Examples block, every `hotfix ...` line of it parses with
that command's own parser (so no example can drift from the options), and every option says what it is for."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from vllm_hotfix.cli import cli
from vllm_hotfix.flow.history_line import PATH_OPTIONS


def every_command(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found = []
    for name, command in sorted(group.commands.items()):
        found.append(((*prefix, name), command))
        if isinstance(command, click.Group):
            found += every_command(command, (*prefix, name))
    return found


COMMANDS = every_command()
NAMES = [" ".join(path) for path, _ in COMMANDS]


def example_lines(text: str) -> list[str]:
    """The commands of every Examples block in ``text`` (a help text or an epilog), continuations joined."""
    found: list[str] = []
    for block in re.findall(r"^\s*Examples\b[^\n]*:\n((?:[ \t]+\S[^\n]*\n?)+)", text, re.M):
        pending = ""
        for line in block.splitlines():
            line = pending + line.strip()
            pending = line[:-1] if line.endswith("\\") else ""
            if not pending:
                found.append(line)
    return found


def hotfix_invocations(line: str) -> list[list[str]]:
    """The argument lists given to `hotfix` on one shell line: each part of a pipeline or a `;` list,
    environment assignments in front left out, a `# comment` dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";|&<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    calls, words = [], []
    for token in [*lexer, ";"]:
        if token and set(token) <= set(";|&<>"):
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
                words.pop(0)
            if words and words[0] == "hotfix":
                calls.append(words[1:])
            words = []
        else:
            words.append(token)
    return calls


def check_parses(args: list[str]) -> None:
    """Parse ``args`` as `hotfix` would, short of running it: the subcommand exists, every option is one
    of its options with its values, no argument is left over, every required one is there, and every
    value that is not a path converts (a path need not exist here)."""
    command, ctx = cli, cli.make_context("hotfix", [], resilient_parsing=True)
    args = list(args)
    while isinstance(command, click.Group):
        assert args and args[0] in command.commands, f"no command {args[:1]} in {ctx.command_path}"
        command = command.commands[args.pop(0)]
        ctx = click.Context(command, info_name=command.name, parent=ctx)
    opts, extra, _ = command.make_parser(ctx).parse_args(args=args)
    assert extra == [], f"unexpected extra arguments {extra}"
    for param in command.params:
        raw = opts.get(param.name)
        given = raw not in (None, ()) and raw is not getattr(click.core, "UNSET", None)  # UNSET: click >= 8.2
        if param.required and not given and not param.envvar:
            raise AssertionError(f"{ctx.command_path}: {param.opts} is required")
        if given and not isinstance(param.type, click.Path):
            param.type_cast_value(ctx, raw)


@pytest.fixture
def no_env_callbacks(monkeypatch):
    """--trust and --allow-shadow set their variables when parsed: keep this process's as they were."""
    for name in ("HOTFIX_TRUST", "HOTFIX_ALLOW_SHADOW"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=NAMES)
def test_every_command_help_has_examples_that_parse(path, no_env_callbacks):
    result = CliRunner().invoke(cli, [*path, "--help"], prog_name="hotfix")
    assert result.exit_code == 0, result.output
    examples = example_lines(result.output)
    calls = [call for line in examples for call in hotfix_invocations(line)]
    assert calls, f"`hotfix {' '.join(path)} --help` shows no `hotfix ...` example:\n{result.output}"
    for call in calls:
        try:
            check_parses(call)
        except (click.ClickException, AssertionError) as exc:
            message = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
            raise AssertionError(f"example `hotfix {shlex.join(call)}`: {message}") from None
    if not isinstance(dict(COMMANDS)[path], click.Group):  # a command's own examples call that command
        assert any(call[:len(path)] == list(path) for call in calls), examples


def test_the_top_level_help_has_examples_that_parse(no_env_callbacks):
    result = CliRunner().invoke(cli, ["--help"], prog_name="hotfix")
    assert result.exit_code == 0
    calls = [call for line in example_lines(result.output) for call in hotfix_invocations(line)]
    assert len(calls) >= 5
    for call in calls:
        check_parses(call)


def test_a_drifted_example_is_caught():
    for bad in (["status", "--no-such-option"], ["apply", "a", "--no-such-option"], ["bake", "x", "--to", "dir"],
                ["guard", "--print-env", "--format", "yaml"], ["no-such-command"]):
        with pytest.raises((click.ClickException, AssertionError)):
            check_parses(bad)
    assert hotfix_invocations("docker logs vllm 2>&1 | hotfix doctor - --json  # a note") == [["doctor", "-", "--json"]]
    assert hotfix_invocations("X_Y=/a hotfix sign f --key k; minisign -G") == [["sign", "f", "--key", "k"]]


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=NAMES)
def test_every_option_says_what_it_is_for(path):
    command = dict(COMMANDS)[path]
    silent = [p.opts for p in command.params if isinstance(p, click.Option) and not (p.help or "").strip()]
    assert silent == []
    root = next((p for p in command.params if p.name == "root"), None)
    if root is not None and path[0] != "apply":
        assert "to patch" not in root.help  # status, verify, log ... only look at the checkout


def test_every_path_option_is_made_absolute_in_the_history():
    path_options = {max(p.opts, key=len) for _, command in COMMANDS for p in command.params
                    if isinstance(p, click.Option) and isinstance(p.type, click.Path)}
    assert path_options <= PATH_OPTIONS, path_options - PATH_OPTIONS


def _entry_point() -> Path:
    script = Path(sys.executable).parent / "hotfix"
    if not script.exists():
        pytest.skip("no installed `hotfix` entry point beside this interpreter")
    return script


def test_help_of_every_command_through_the_installed_entry_point():
    script = _entry_point()
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    for name in ["", *NAMES]:
        done = subprocess.run([str(script), *name.split(), "--help"], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 0 and done.stderr == "", (name, done.stderr)
        assert [c for line in example_lines(done.stdout) for c in hotfix_invocations(line)], (name, done.stdout)
        assert max(len(line) for line in done.stdout.splitlines()) <= 100, name  # click's width, examples too


def test_list_into_a_pipe_through_the_installed_entry_point():
    script = _entry_point()
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PATH"] = f"{script.parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(["bash", "-c", "set -o pipefail; hotfix list | cat"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    assert rows and {len(row) for row in rows} == {6}  # one line per hotfix, six tab-separated fields
    assert "mamba-align-block-size" in [row[0] for row in rows] and "ID" not in [row[0] for row in rows]


def test_help_fits_a_narrow_terminal_and_keeps_its_width_into_a_pipe():
    script, entry = shutil.which("script"), _entry_point()
    if script is None:
        pytest.skip("util-linux `script` (a pseudo-terminal) is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run([script, "-qec", f"stty cols 60 rows 40; {shlex.quote(str(entry))} verify --help", "/dev/null"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout
    lines = done.stdout.replace("\r", "").splitlines()
    prose = lines[:lines.index("  Examples:")]  # an example is never rewrapped: it has to run as pasted
    assert prose and max(len(line) for line in prose) <= 60, prose
    piped = subprocess.run([str(entry), "verify", "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert max(len(line) for line in piped.stdout.splitlines()) > 60  # into a pipe: click's 100 columns
