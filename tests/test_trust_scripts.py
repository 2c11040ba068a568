"""Issue 31, generated scripts never re-parse a name: `hotfix bake`'s bake.sh quotes every interpolated value
for sh and its Containerfile takes only values it cannot re-parse. The script runs under a stub interpreter
and a stub pip with hostile names (the patched files' paths, the guard's wheel, --image-python,
--container-site-packages): each name arrives as one argument, exactly, and nothing runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from vllm_hotfix.containers import bake_context

HOSTILE = ["vllm/fix$(touch PWNED-dollar).py", "vllm/fix`touch PWNED-tick`.py", "vllm/fix;touch PWNED-semi;.py",
           "vllm/fix 'quoted' \"both\" \\back.py", "vllm/fix\nnewline.py", "vllm/fix*glob?.py", "vllm/-dash/x.py"]
WHEEL = "vllm_hotfix_guard-0.1.0-py3-none-any$(touch PWNED-wheel).whl"

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


def context(ctx: Path, **options) -> Path:
    """A context as `hotfix bake` writes it, from bake_context's texts (the paths of a real export come from
    a lock; here they are chosen to be hostile)."""
    spec = bake_context.Bake(base="vllm/vllm-openai:v0.30.0", hotfix_ids=("x",), files=tuple(HOSTILE),
                             guard_wheel=WHEEL, **options)
    here = ctx / bake_context.CONTEXT_DIR
    for rel in HOSTILE:
        (here / bake_context.FILES_DIR / rel).parent.mkdir(parents=True, exist_ok=True)
        (here / bake_context.FILES_DIR / rel).write_text(f"# {rel}\n")
    (here / WHEEL).write_bytes(b"PK\x05\x06" + b"\0" * 18)
    (here / "bake.sh").write_text(bake_context.script(spec))
    (ctx / "Containerfile").write_text(bake_context.containerfile(spec))
    return here / "bake.sh"


def test_bake_script_passes_hostile_names_as_single_arguments(tmp_path):
    site = tmp_path / "site $(touch PWNED-site)"
    script = context(tmp_path / "ctx", python="python3 $(touch PWNED-python)", site_packages=str(site))
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "calls"
    env = {"PATH": os.environ["PATH"], "STUB_LOG": str(log), "HOTFIX_BAKE_PYTHON": str(stub(tmp_path / "python")),
           "HOTFIX_BAKE_PIP": str(stub(tmp_path / "pip"))}
    ran = subprocess.run(["sh", str(script)], cwd=work, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    made = [p.name for base in (work, tmp_path, tmp_path / "ctx", script.parent) for p in base.iterdir()]
    assert not [name for name in made if name.startswith("PWNED")], made
    for rel in HOSTILE:  # each file lands at its own path, byte for byte
        assert (site / rel).read_text() == f"# {rel}\n"
    pip, verify = calls(log)
    assert pip == ["install", "--no-index", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
                   f"{script.parent}/{WHEEL}"]
    assert verify == ["-m", "vllm_hotfix_guard", "verify", "--lock", f"{script.parent}/hotfix.lock"]
    del env["HOTFIX_BAKE_PYTHON"]  # the --image-python name itself: looked up, never run as shell
    ran = subprocess.run(["sh", str(script)], cwd=work, env=env, capture_output=True, text=True)
    assert ran.returncode != 0 and not list(work.glob("PWNED*")) and not list(tmp_path.glob("PWNED*"))


@pytest.mark.parametrize("base", ["vllm/vllm-openai:$TAG", "x\\", "x\"y", "vllm:1\nRUN id", "x'y", "${BASE}"])
def test_a_base_the_containerfile_would_re_parse_is_refused(tmp_path, run_hotfix, base):
    export = tmp_path / "export"
    export.mkdir()
    done = run_hotfix("bake", "--export-dir", export, "--base", base, "--to", tmp_path / "ctx")
    assert done.returncode == 2 and "--base must be an image reference" in done.stderr, done.stderr
    assert not (tmp_path / "ctx").exists()


def test_the_containerfile_has_one_copy_one_run_in_exec_form(tmp_path):
    context(tmp_path / "ctx")
    text = (tmp_path / "ctx" / "Containerfile").read_text()
    assert [line.split()[0] for line in text.splitlines() if line and not line.startswith(("#", " "))] == \
        ["FROM", "COPY", "RUN", "ENV"]
    assert 'RUN ["/bin/sh", "/opt/vllm-hotfix/bake.sh"]' in text


def test_the_script_runs_with_a_context_path_full_of_shell(tmp_path):
    """The script finds itself through "$0" quoted: a context under a hostile directory name still works."""
    ctx = tmp_path / "a dir $(touch PWNED) `x`" / "ctx"
    site = tmp_path / "site"
    script = context(ctx, site_packages=str(site))
    log = tmp_path / "calls"
    env = {"PATH": os.environ["PATH"], "STUB_LOG": str(log), "HOTFIX_BAKE_PYTHON": str(stub(tmp_path / "python")),
           "HOTFIX_BAKE_PIP": str(stub(tmp_path / "pip"))}
    ran = subprocess.run(["sh", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert calls(log)[0][-1] == f"{ctx}/vllm-hotfix/{WHEEL}"
    assert not list(tmp_path.glob("PWNED*"))
