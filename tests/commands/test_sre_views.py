"""What an SRE looks at (issue 24 items 4, 11 and the overlay warning): one warning for a PYTHONPATH
overlay in apply, audit, status and verify, on a real vLLM 0.30.0 install."""

from __future__ import annotations

import json
import shlex

import pytest

import realdata

pytestmark = pytest.mark.real

HOTFIX = "mamba-align-block-size"
PATH = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("hotfix: warning: ")]


def test_a_pythonpath_overlay_gets_the_same_warning_from_apply_audit_status_and_verify(vllm_template, run_hotfix,
                                                                                       tmp_path):
    venv = vllm_template("0.30.0")  # read only: nothing below writes
    overlay = realdata.python_sources(venv.site_packages, tmp_path / "overlay")
    env = {"PYTHONPATH": str(overlay)}
    said = {}
    for command in (("apply", HOTFIX, "--dry-run"), ("audit", "vllm"), ("status",), ("verify", HOTFIX)):
        done = run_hotfix(*command, "--python", venv.python, env=env)
        assert done.returncode in (0, 1), done.stderr
        said[command[0]] = warnings_of(done.stderr)
    shadow = (f"hotfix: warning: vllm is loaded from {overlay / 'vllm'} (PYTHONPATH entry {overlay}), which shadows "
              f"the installed vllm 0.30.0 at {venv.package_dir}: edits to either copy affect only that copy")
    assert said["apply"][0] == shadow and said["apply"][1].startswith("hotfix: warning: 2 copies of vllm on sys.path")
    assert said["audit"] == said["status"] == said["verify"] == said["apply"]
    status = json.loads(run_hotfix("status", "--python", venv.python, "--json", env=env).stdout)
    assert all(s["warnings"] == [w[len("hotfix: warning: "):] for w in said["apply"]] for s in status)
    assert warnings_of(run_hotfix("status", "--python", venv.python).stderr) == []  # no overlay, no warning


def test_a_fix_that_lives_in_a_bind_mount_is_said_to_and_the_hint_declares_it(vllm_install, run_hotfix, tmp_path):
    """Seed 001's blind spot: the patched file `mount --bind -o ro` over site-packages. where, status and
    verify say "in effect through a bind mount from <source>" (from /proc/self/mountinfo), verify --json
    carries it, and the to-do declares the mount (export + compose, verify --lock); with HOTFIX_LOCK naming
    it, it is declared and there is nothing to do."""
    from fixtures.mounts import bind_read_only

    venv = vllm_install("0.30.0")
    options = ("--python", venv.python)
    assert run_hotfix("export", HOTFIX, "--to", tmp_path / "export", *options).returncode == 0
    patched = tmp_path / "export" / HOTFIX / PATH
    with bind_read_only(patched, venv.site_packages / PATH):
        where = run_hotfix("where", "vllm", *options)
        assert (f"mounted:      {venv.site_packages / PATH}: a bind mount from {patched} (read-only); a rebuild "
                "without the mount loses it") in where.stdout
        (mount,) = json.loads(run_hotfix("where", "vllm", *options, "--json").stdout)["mounts"]
        assert mount == {"path": PATH.split("/", 1)[1], "mount_point": str(venv.site_packages / PATH),
                         "source": str(patched), "source_visible": True, "read_only": True}

        status = run_hotfix("status", HOTFIX, *options)
        assert status.returncode == 0, status.stderr
        lines = status.stdout.splitlines()
        assert lines[0].split()[:3] == ["ok", HOTFIX, "applied"]
        assert lines[1].strip() == (f"in effect through a bind mount from {patched}: a rebuild or a compose file "
                                    "without the mount loses it")
        assert lines[2].strip().startswith(f"to do: declare the mount where the container is defined: `hotfix export "
                                           f"{HOTFIX} --to hotfix-export --python {venv.python}`, then `hotfix compose "
                                           f"{HOTFIX} --export-dir hotfix-export --service` followed by the name of the "
                                           "compose service that runs vLLM")
        assert "`hotfix verify --lock`" in lines[2] and "SERVICE" not in lines[2]
        export_line, compose_line = lines[2].split("`")[1], lines[2].split("`")[3]

        verify = run_hotfix("verify", HOTFIX, *options)
        assert verify.returncode == 0
        assert verify.stdout.splitlines()[0] == (f"in effect: {HOTFIX}@1 (applied, {venv.site_packages}) through a bind "
                                                 f"mount from {patched}")
        (found,) = json.loads(run_hotfix("verify", HOTFIX, *options, "--json").stdout)
        assert found["state"] == "applied" and found["files"][0]["mount"]["source"] == str(patched)
        assert [m["mount_point"] for m in found["mounts"]] == [str(venv.site_packages / PATH)]

        lock = tmp_path / "export" / "hotfix.lock"
        (locked,) = json.loads(run_hotfix("verify", "--lock", lock, *options, "--json").stdout)
        assert locked["state"] == "applied" and locked["files"][0]["mount"]["source"] == str(patched)
        declared = run_hotfix("status", HOTFIX, *options, env={"HOTFIX_LOCK": str(lock)})
        assert f"through a bind mount from {patched}, declared by the lock {lock} (HOTFIX_LOCK)" in declared.stdout
        assert "to do:" not in declared.stdout

    assert "mounted:" not in run_hotfix("where", "vllm", *options).stdout  # the mount is gone: so is the fix
    project = tmp_path / "project"  # the printed steps run as pasted (the service's name typed after compose's)
    project.mkdir()
    (project / "compose.yaml").write_text("services:\n  vllm:\n    image: vllm/vllm-openai:v0.30.0\n")
    exported = run_hotfix(*shlex.split(export_line)[1:], cwd=project)
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.splitlines()[-1] == (f"next: `hotfix compose {HOTFIX} --export-dir hotfix-export --service` "
                                                "followed by the name of the compose service that runs vLLM")
    composed = run_hotfix(*shlex.split(compose_line)[1:], "vllm", cwd=project)
    assert composed.returncode == 0, composed.stderr
    assert f"./hotfix-export/{HOTFIX}/" in (project / "compose.yaml").read_text()
    (gone,) = json.loads(run_hotfix("status", HOTFIX, *options, "--json").stdout)
    assert gone["state"] == "not-applied" and gone["mounts"] == []


@pytest.mark.parametrize("edit, code", [("conflict", 4), ("appended", 3)])
def test_vendor_bytes_in_a_mount_get_a_hint_that_can_work(vllm_install, run_hotfix, tmp_path, edit, code):
    """A mount holding vendor-edited bytes: "pip install --force-reinstall" cannot change a mounted file;
    status, verify and apply (a hunk that does not apply: 4; not RECORD's bytes: 3) say where the bytes
    come from and what can be done."""
    from fixtures.mounts import bind_read_only

    venv = vllm_install("0.30.0")
    options = ("--python", venv.python)
    vendor = tmp_path / "vendor" / "mamba_hybrid.py"
    vendor.parent.mkdir()
    pristine = (venv.site_packages / PATH).read_bytes()
    if edit == "conflict":
        vendor.write_bytes(pristine.replace(b"// self.cache_config.block_size", b"// max(1, self.cache_config.block_size)"))
    else:
        vendor.write_bytes(pristine + b"# vendor build 2026-11-30\n")
    assert vendor.read_bytes() != pristine
    with bind_read_only(vendor, venv.site_packages / PATH):
        (status,) = json.loads(run_hotfix("status", HOTFIX, *options, "--json").stdout)
        assert status["state"] == ("drifted" if edit == "conflict" else "not-applied"), status
        assert status["detail"].endswith(f"{PATH} is a bind mount from {vendor}")
        words = {f["path"]: f["state"] for f in status["files"]}  # not RECORD's bytes: what apply and audit say too
        assert words[PATH] == "changed", status["files"]
        audit = run_hotfix("audit", "vllm", *options)
        assert audit.returncode == 1 and "NOT pristine" in audit.stdout, audit.stdout
        assert status["advice"].startswith(f"{PATH} comes from the bind mount of {vendor}, which neither a reinstall "
                                           "nor `hotfix apply` can change: remove the mount")
        verify = run_hotfix("verify", HOTFIX, *options)
        assert verify.returncode == 1 and f"to do: {PATH} comes from the bind mount of {vendor}" in verify.stdout
        for dry_run in (("--dry-run",), ()):
            applied = run_hotfix("apply", HOTFIX, *options, *dry_run)
            assert applied.returncode == code, applied.stderr
            assert applied.stderr.splitlines()[0].endswith(f"; {PATH} is a bind mount from {vendor}")
            assert "force-reinstall" not in applied.stderr and "remove the mount" in applied.stderr
        hint = applied.stderr.splitlines()[-1]
    assert (venv.site_packages / PATH).read_bytes() == pristine
    assert "ID" not in hint.split("`") and "DIR" not in hint  # the mount removed, the steps run as pasted
    project = tmp_path / "project"
    project.mkdir()
    (project / "compose.yaml").write_text("services:\n  vllm:\n    image: vllm/vllm-openai:v0.30.0\n")
    exported = run_hotfix(*shlex.split(hint.split("`")[1])[1:], cwd=project)
    assert exported.returncode == 0, exported.stderr
    composed = run_hotfix(*shlex.split(hint.split("`")[3])[1:], "vllm", cwd=project)
    assert composed.returncode == 0, composed.stderr
