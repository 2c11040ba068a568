"""Issue 31, generated scripts never re-parse a name: `hotfix bake`'s bake.sh quotes every interpolated value
for sh and its Containerfile takes only values it cannot re-parse. The script runs under a stub interpreter
and a stub pip with hostile file names: each name arrives as one argument, exactly, and nothing runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HOTFIX = "mamba-align-block-size"
HOSTILE = ["fix$(touch PWNED-dollar).patch", "fix`touch PWNED-tick`.patch", "fix;touch PWNED-semi;.patch",
           "fix 'quoted' \"both\" \\back.patch", "fix\nnewline.patch", "fix*glob?.patch", "-dash.patch"]

STUB = """#!/bin/sh
# stands for the image's interpreter / pip: one argument per line, NUL-terminated, then exit 0
for arg in "$@"; do printf '%s\\0' "$arg"; done >> "$STUB_LOG"
printf '\\n' >> "$STUB_LOG"
"""


def stub(path: Path) -> Path:
    path.write_text(STUB)
    path.chmod(0o755)
    return path


def calls(log: Path) -> list[list[str]]:
    return [[a for a in line.split("\0") if a != ""] for line in log.read_text().split("\0\n") if line]


def test_bake_script_passes_hostile_names_as_single_arguments(tmp_path, run_hotfix):
    inputs = tmp_path / "in"
    inputs.mkdir()
    patches = []
    for name in HOSTILE:
        (inputs / name).write_bytes(b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
        patches += ["--patch-file", str(inputs / name)]
    wheel = inputs / "vllm_hotfix-0.1.0-py3-none-any$(touch PWNED-wheel).whl"
    wheel.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip: the stub pip never opens it
    ctx = tmp_path / "ctx"
    done = run_hotfix("bake", HOTFIX, "--base", "vllm/vllm-openai:v0.30.0", "--to", ctx, "--wheel", wheel,
                      "--image-python", "python3 $(touch PWNED-python)", *patches, "--json")
    assert done.returncode == 0, done.stderr
    script = ctx / "vllm-hotfix" / "bake.sh"
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "calls"
    env = {"PATH": os.environ["PATH"], "STUB_LOG": str(log), "HOTFIX_BAKE_PYTHON": str(stub(tmp_path / "python")),
           "HOTFIX_BAKE_PIP": str(stub(tmp_path / "pip")), "HOTFIX_BAKE_EXPORT": str(tmp_path / "export dir $(x)")}
    ran = subprocess.run(["sh", str(script)], cwd=work, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    made = [p.name for base in (work, tmp_path, ctx, ctx / "vllm-hotfix", inputs) for p in base.iterdir()]
    assert not [name for name in made if name.startswith("PWNED")], made
    here = str(ctx / "vllm-hotfix")
    pip, apply, verify, export, verify_lock = calls(log)
    assert pip == ["install", "--no-cache-dir", f"{here}/wheels/{wheel.name}"]
    assert apply[:4] == ["-m", "vllm_hotfix", "apply", HOTFIX]
    given = [apply[i + 1] for i, a in enumerate(apply) if a == "--patch-file"]
    assert given == [f"{here}/patch-files/{name}" for name in HOSTILE]  # each one argument, byte for byte
    assert all(Path(p).read_bytes() == (inputs / Path(p).name).read_bytes() for p in given)
    assert verify[:3] == ["-m", "vllm_hotfix", "verify"] and export[export.index("--to") + 1] == env["HOTFIX_BAKE_EXPORT"]
    assert f"{env['HOTFIX_BAKE_EXPORT']}/hotfix.lock" in verify_lock
    del env["HOTFIX_BAKE_PYTHON"]  # the --image-python name itself: looked up, never run as shell
    ran = subprocess.run(["sh", str(script)], cwd=work, env=env, capture_output=True, text=True)
    assert ran.returncode != 0 and not list(work.glob("PWNED*")) and not list(tmp_path.glob("PWNED*"))


@pytest.mark.parametrize("base", ["vllm/vllm-openai:$TAG", "x\\", "x\"y", "vllm:1\nRUN id", "x'y", "${BASE}"])
def test_a_base_the_containerfile_would_re_parse_is_refused(tmp_path, run_hotfix, base):
    done = run_hotfix("bake", HOTFIX, "--base", base, "--to", tmp_path / "ctx")
    assert done.returncode == 2 and "--base must be an image reference" in done.stderr, done.stderr
    assert not (tmp_path / "ctx").exists()


def test_a_ref_that_is_not_an_id_never_reaches_the_containerfile(tmp_path, run_hotfix):
    done = run_hotfix("bake", f"{HOTFIX}@1\nRUN id", "--base", "vllm/vllm-openai:v0.30.0", "--to", tmp_path / "ctx")
    assert done.returncode in (2, 3) and not (tmp_path / "ctx").exists(), done.stderr
    done = run_hotfix("bake", HOTFIX, "--base", "vllm/vllm-openai:v0.30.0", "--to", tmp_path / "ctx", "--from-index",
                      "--json")
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "ctx" / "Containerfile").read_text()
    assert json.loads(done.stdout)["base"] == "vllm/vllm-openai:v0.30.0"
    assert [line.split()[0] for line in text.splitlines() if line and not line.startswith(("#", " "))] == \
        ["FROM", "ENV", "COPY", "RUN", "ENV"]


def test_the_script_runs_with_a_context_path_full_of_shell(tmp_path, run_hotfix):
    """The script finds itself through "$0" quoted: a context under a hostile directory name still works."""
    ctx = tmp_path / "a dir $(touch PWNED) `x`" / "ctx"
    wheel = tmp_path / "vllm_hotfix-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK\x05\x06" + b"\0" * 18)
    done = run_hotfix("bake", HOTFIX, "--base", "vllm/vllm-openai:v0.30.0", "--to", ctx, "--wheel", wheel)
    assert done.returncode == 0, done.stderr
    log = tmp_path / "calls"
    env = {"PATH": os.environ["PATH"], "STUB_LOG": str(log), "HOTFIX_BAKE_PYTHON": str(stub(tmp_path / "python")),
           "HOTFIX_BAKE_PIP": str(stub(tmp_path / "pip")), "HOTFIX_BAKE_EXPORT": str(tmp_path / "export")}
    ran = subprocess.run(["sh", str(ctx / "vllm-hotfix" / "bake.sh")], cwd=tmp_path, env=env, capture_output=True,
                         text=True)
    assert ran.returncode == 0, ran.stderr
    assert calls(log)[0][-1] == f"{ctx}/vllm-hotfix/wheels/{wheel.name}"
    assert not list(tmp_path.glob("PWNED*")) and sys.executable
