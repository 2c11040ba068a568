"""The guard as its own distribution (issues 33, 43): the vllm_hotfix_guard source package, zipped verbatim
(nothing rewritten), stdlib only, reproducible; installed with pip from nothing but its wheel; imported by
nothing but its entry point's module when the guard is off; with readiness on (the default compose / k8s
setting) the built wheel runs in a venv with no vllm_hotfix; its in-container `verify` gives what `hotfix
verify --lock` gives on the host, on the same installs."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

import pytest

from vllm_hotfix.containers import guard_dist
from vllm_hotfix_guard.errors import Refused

GUARD = Path(guard_dist.__file__).resolve().parents[2] / "vllm_hotfix_guard"


@pytest.fixture(scope="module")
def dist():
    return guard_dist.current()


def test_the_distribution_is_the_package_folder_verbatim(dist):
    files = dict(dist.files)
    sources = {f"vllm_hotfix_guard/{p.relative_to(GUARD).as_posix()}": p.read_bytes() for p in GUARD.rglob("*.py")}
    assert {rel: data for rel, data in files.items() if rel.startswith("vllm_hotfix_guard/")} == sources
    assert set(files) - set(sources) == {f"{dist.dist_info}/{name}" for name in
                                         ("METADATA", "WHEEL", "entry_points.txt", "top_level.txt", "RECORD")}
    assert "vllm_hotfix_guard/ready.py" in files and "vllm_hotfix_guard/core/verdict.py" in files


def test_no_import_rewriting_is_left_in_the_build():
    source = Path(guard_dist.__file__).read_text()
    assert "tokenize" not in source and "rewrite" not in source and "closure" not in source


def test_reproducible_and_its_record_holds(dist, tmp_path):
    again = guard_dist.build(*guard_dist.own_source())
    assert again == dist and guard_dist.wheel_bytes(again) == guard_dist.wheel_bytes(dist)
    files = dict(dist.files)
    record = files[f"{dist.dist_info}/RECORD"].decode().splitlines()
    assert len(record) == len(files)
    for line in record:
        rel, digest, size = line.split(",")
        if rel.endswith("/RECORD"):
            continue
        data = files[rel]
        assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert int(size) == len(data)
    with zipfile.ZipFile(BytesIO(guard_dist.wheel_bytes(dist))) as wheel:
        assert wheel.namelist() == [rel for rel, _ in dist.files]
    assert files[f"{dist.dist_info}/entry_points.txt"] == \
        b"[vllm.general_plugins]\nvllm_hotfix_guard = vllm_hotfix_guard:register\n"
    import vllm_hotfix
    import vllm_hotfix_guard

    assert dist.version == vllm_hotfix_guard.__version__ == vllm_hotfix.__version__  # released together
    assert b"Name: vllm-hotfix-guard\n" in files[f"{dist.dist_info}/METADATA"]


def test_refuses_a_package_folder_holding_anything_but_sources(tmp_path):
    folder = tmp_path / "vllm_hotfix_guard"
    (folder / "core" / "__pycache__").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "core" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"skipped")
    assert [rel for rel, _ in guard_dist.build(folder, "1").files][:1] == ["vllm_hotfix_guard/__init__.py"]
    (folder / "sitecustomize.pth").write_text("import os\n")
    with pytest.raises(Refused, match="holds only Python sources"):
        guard_dist.build(folder, "1")
    (folder / "sitecustomize.pth").unlink()
    (folder / "core" / "linked.py").symlink_to(folder / "__init__.py")
    with pytest.raises(Refused, match="not a regular file"):
        guard_dist.build(folder, "1")


def test_build_dist_writes_the_wheel_and_the_tree(tmp_path, run_hotfix, dist):
    done = run_hotfix("guard", "--build-dist", tmp_path / "out", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert Path(report["wheel"]).read_bytes() == guard_dist.wheel_bytes(dist)
    site = tmp_path / "out" / "site-packages"
    assert sorted(p.name for p in site.iterdir()) == sorted(dist.top)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("x")
    refused = run_hotfix("guard", "--build-dist", foreign)
    assert refused.returncode == 3 and "not empty" in refused.stderr and (foreign / "notes.txt").read_text() == "x"


@pytest.fixture(scope="module")
def guard_venv(tmp_path_factory, dist):
    """A fresh venv (no vllm, no vllm-hotfix) with the guard's wheel installed by pip from nothing else."""
    root = tmp_path_factory.mktemp("guard-venv")
    wheel = root / dist.wheel_name
    wheel.write_bytes(guard_dist.wheel_bytes(dist))
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    before = _installed(python)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--disable-pip-version-check", str(wheel)],
                   check=True, env={**os.environ, "PIP_NO_INDEX": "1"})
    return python, before


def _installed(python: Path) -> set[str]:
    out = subprocess.run([str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
                         capture_output=True, text=True, check=True).stdout
    return {d["name"].lower() for d in json.loads(out)}


LOADER = """
import json, sys
from importlib.metadata import entry_points
found = list(entry_points(group="vllm.general_plugins"))
before = set(sys.modules)
for ep in found:
    ep.load()()
print(json.dumps({"entry_points": [ep.value for ep in found], "new": sorted(set(sys.modules) - before)}))
"""


@pytest.mark.slow
def test_pip_installs_nothing_else_and_a_process_without_the_guard_settings_imports_nothing(guard_venv):
    python, before = guard_venv
    assert _installed(python) - before == {"vllm-hotfix-guard"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOTFIX_") and k != "PYTHONPATH"}
    done = subprocess.run([str(python), "-c", LOADER], capture_output=True, text=True, env=env, check=True)
    report = json.loads(done.stdout)
    assert report == {"entry_points": ["vllm_hotfix_guard:register"], "new": ["vllm_hotfix_guard"]}


@pytest.mark.slow
def test_the_built_wheel_with_readiness_on_never_raises_and_records_the_process(guard_venv, tmp_path):
    """Issue 43: with HOTFIX_READY_DIR set (compose / k8s set it by default), the delivered guard in a venv with
    no vllm_hotfix ran `__import__("vllm_hotfix.guard.ready")` and raised ModuleNotFoundError out of vLLM's
    plugin loader. The built wheel now records the process; a vllm_hotfix planted in the working directory is
    never imported."""
    python, _ = guard_venv
    lock = tmp_path / "hotfix.lock"
    lock.write_text("{}")  # not a lock: the guard says so, once, and records the process as not ready
    planted = tmp_path / "cwd" / "vllm_hotfix"
    planted.mkdir(parents=True)
    (tmp_path / "ready").mkdir()  # the volume compose / k8s mount there
    (planted / "__init__.py").write_text("raise SystemExit('planted vllm_hotfix imported')\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HOTFIX_") and k != "PYTHONPATH"},
           "HOTFIX_LOCK": str(lock), "HOTFIX_READY_DIR": str(tmp_path / "ready")}
    done = subprocess.run([str(python), "-c", LOADER], capture_output=True, text=True, env=env, cwd=planted.parent)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "vllm_hotfix_guard.ready" in report["new"] and not any(m.split(".")[0] == "vllm_hotfix" for m in report["new"])
    assert done.stderr.count("vllm-hotfix guard pid=") == 1 and "cannot use HOTFIX_LOCK" in done.stderr
    assert len(list((tmp_path / "ready").iterdir())) == 1
    probe = subprocess.run([str(python), "-I", "-m", "vllm_hotfix_guard", "ready", "--expect", "api=1"],
                           capture_output=True, text=True, env=env, cwd=planted.parent)
    assert probe.returncode == 1, (probe.stdout, probe.stderr)  # recorded, not in effect: not ready


@pytest.mark.slow
def test_in_container_verify_refuses_as_the_cli_does(guard_venv, tmp_path, run_hotfix):
    python, _ = guard_venv
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOTFIX_") and k != "PYTHONPATH"}
    bad = tmp_path / "hotfix.lock"
    bad.write_text("{not json")
    for args in (["--lock", str(bad)], ["--lock", str(tmp_path / "missing.lock")]):
        guard = subprocess.run([str(python), "-m", "vllm_hotfix_guard", "verify", *args], capture_output=True,
                               text=True, env=env)
        host = run_hotfix("verify", *args, "--python", python)
        assert (guard.returncode, guard.stdout, guard.stderr) == (host.returncode, host.stdout, host.stderr) \
            and guard.returncode == 8
    missing = subprocess.run([str(python), "-m", "vllm_hotfix_guard", "verify"], capture_output=True, text=True, env=env)
    assert missing.returncode == 2 and "give --lock FILE or set HOTFIX_LOCK" in missing.stderr


@pytest.mark.real
def test_in_container_verify_matches_the_host_on_the_same_installs(vllm_install, run_hotfix, tmp_path):
    """A real vLLM 0.30.0 install with no vllm-hotfix: the export's mounts copied onto it; the guard's
    `verify` and the host's `verify --lock` agree: in effect (0), a reverted file (1), JSON and all."""
    venv = vllm_install("0.30.0")
    export = tmp_path / "export"
    done = run_hotfix("export", "mamba-align-block-size", "--to", export, "--python", venv.python)
    assert done.returncode == 0, done.stderr
    lock = json.loads((export / "hotfix.lock").read_text())
    (locked,) = lock["hotfixes"][0]["files"]
    target = venv.site_packages / locked["path"]
    pristine = target.read_bytes()
    shutil.copyfile(export / locked["export"], target)  # the bind mount
    for top in (export / "guard" / "site-packages").iterdir():  # the guard's read-only mounts
        shutil.copytree(top, venv.site_packages / top.name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOTFIX_") and k != "PYTHONPATH"}
    show = subprocess.run([str(venv.python), "-m", "pip", "show", "vllm-hotfix"], capture_output=True, env=env)
    assert show.returncode != 0  # nothing of the CLI in there

    def both(*args: str) -> tuple:
        guard = subprocess.run([str(venv.python), "-m", "vllm_hotfix_guard", "verify", "--lock",
                                str(export / "hotfix.lock"), *args], capture_output=True, text=True, env=env)
        host = run_hotfix("verify", "--lock", export / "hotfix.lock", "--python", venv.python, *args)
        assert (guard.returncode, guard.stdout) == (host.returncode, host.stdout), (guard.stderr, host.stderr)
        return guard.returncode, guard.stdout

    code, out = both()
    assert code == 0 and out.startswith("in effect: mamba-align-block-size@") and "fingerprint: hf1-" in out
    assert both("--json")[0] == 0
    target.write_bytes(pristine)  # the mount is gone: the container runs the pristine file
    code, out = both()
    assert code == 1 and "NOT IN EFFECT: mamba-align-block-size@" in out
    assert both("--json")[0] == 1


@pytest.mark.tools
def test_compose_mounts_the_guard_read_only_and_remove_restores_the_file(tmp_path, run_hotfix, dist):
    from fixtures.composefiles import LIST_ENV, validate
    from fixtures.kube import SITE, make_export

    project = tmp_path / "project"
    export = make_export(project / "hotfix-export")
    compose = project / "docker-compose.yml"
    compose.write_text(LIST_ENV)
    done = run_hotfix("compose", "--service", "vllm", "--export-dir", export, "--file", compose, cwd=project)
    assert done.returncode == 0, done.stderr
    text = compose.read_text()
    for top in dist.top:
        assert f"- ./hotfix-export/guard/site-packages/{top}:{SITE}/{top}:ro\n" in text, text
    validate(compose)
    removed = run_hotfix("compose", "--service", "vllm", "--export-dir", export, "--file", compose, "--remove", cwd=project)
    assert removed.returncode == 0, removed.stderr
    assert compose.read_text() == LIST_ENV


@pytest.mark.tools
def test_strict_mode_is_refused_where_the_guard_is_not_delivered(tmp_path, run_hotfix):
    from fixtures.composefiles import LIST_ENV
    from fixtures.kube import DEPLOYMENT, make_export

    export = make_export(tmp_path / "export", guard=False)
    base = tmp_path / "base.yaml"
    base.write_text(DEPLOYMENT)
    args = ("k8s", "--export-dir", export, "--base", base, "--to", tmp_path / "overlay", "--workload", "deployment/vllm",
            "--container", "vllm")
    refused = run_hotfix(*args)
    assert refused.returncode == 3 and "carries no guard" in refused.stderr and not (tmp_path / "overlay").exists()
    assert len(refused.stderr.splitlines()) == 2  # the error and its hint, which ends on the command to paste
    assert refused.stderr.splitlines()[1].endswith(f"hotfix k8s {shlex.join(map(str, args[1:]))} --no-guard --no-strict")
    for more in (("--no-strict",), ("--no-guard",)):  # no guard: --no-guard too; --no-guard: strict mode off too
        again = run_hotfix(*args, *more)
        assert again.returncode == 3 and "carries no guard" in again.stderr and not (tmp_path / "overlay").exists()
    assert run_hotfix(*args, "--no-guard", "--no-strict").returncode == 0
    guarded = make_export(tmp_path / "guarded")  # --no-guard where the export carries it: a usage error, nothing written
    done = run_hotfix("k8s", "--export-dir", guarded, "--base", base, "--to", tmp_path / "o2", "--workload",
                      "deployment/vllm", "--container", "vllm", "--no-guard", "--no-strict")
    assert done.returncode == 2 and "carries the guard" in done.stderr and not (tmp_path / "o2").exists(), done.stderr
    compose = tmp_path / "docker-compose.yml"
    compose.write_text(LIST_ENV)
    for more in ((), ("--no-strict",), ("--no-guard",)):  # compose: the same rule, the same options
        refused = run_hotfix("compose", "--service", "vllm", "--export-dir", export, "--file", compose, *more)
        assert refused.returncode == 3 and "carries no guard" in refused.stderr and compose.read_text() == LIST_ENV
        assert refused.stderr.splitlines()[-1].endswith(" --no-strict"), refused.stderr  # the command, turned off
    assert run_hotfix("compose", "--service", "vllm", "--export-dir", export, "--file", compose, "--no-guard",
                      "--no-strict").returncode == 0
    for value in ("1", "yes"):  # strict as the guard reads it (vllm_hotfix_guard.process.strict)
        no_guard = run_hotfix("export", "mamba-align-block-size", "--to", tmp_path / "e2", "--no-guard",
                              env={"HOTFIX_STRICT": value})
        assert no_guard.returncode == 3 and f"--no-guard with HOTFIX_STRICT={value}:" in no_guard.stderr
        assert not (tmp_path / "e2").exists()


def test_a_changed_guard_tree_is_refused(tmp_path, run_hotfix):
    from fixtures.kube import make_export

    export = make_export(tmp_path / "export")
    plugin = next((export / "guard" / "site-packages").rglob("plugin.py"))
    plugin.write_bytes(plugin.read_bytes() + b"\nimport os; os.system('id')\n")
    compose = tmp_path / "docker-compose.yml"
    compose.write_text("services:\n  vllm:\n    image: x\n")
    done = run_hotfix("compose", "--service", "vllm", "--export-dir", export, "--file", compose)
    assert done.returncode == 8 and "does not hold the bytes its RECORD names" in done.stderr
    assert compose.read_text() == "services:\n  vllm:\n    image: x\n"


def _reseal(site: Path) -> None:
    """Rewrite the guard tree's RECORD over what is on disk now (what an attacker who edits the tree does)."""
    (info,) = [p for p in site.iterdir() if p.name.endswith(".dist-info")]
    rows = []
    for path in sorted(p for p in site.rglob("*") if p.is_file() and p.name != "RECORD"):
        data = path.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{path.relative_to(site).as_posix()},sha256={digest},{len(data)}\n")
    (info / "RECORD").write_text("".join(rows) + f"{info.name}/RECORD,,\n")


@pytest.mark.parametrize("attack", ["trojan plugin", "sitecustomize", "pth", "over vllm", "lock names none"])
def test_every_recipe_refuses_a_guard_the_lock_does_not_name(tmp_path, run_hotfix, attack):
    """Issue 43: the lock names every guard file and its sha256 (so a signature of the lock covers the guard);
    compose, k8s, pack and bake refuse a guard tree whose files differ from the lock's, a file outside the
    guard's own package and dist-info (even with a RECORD resealed over it), or a lock that names no guard."""
    from fixtures.kube import DEPLOYMENT, make_export
    from vllm_hotfix_guard.txn.hotfix_lock import dump_lock, load_lock

    export = make_export(tmp_path / "export")
    site = export / "guard" / "site-packages"
    if attack == "trojan plugin":  # "every lock is trusted"
        plugin = site / "vllm_hotfix_guard" / "trust.py"
        plugin.write_bytes(plugin.read_bytes() + b"\ndef read_lock_here(path):\n    raise SystemExit\n")
        expected = "differs from the guard file the lock names"  # RECORD first, then trust.py
    elif attack == "sitecustomize":
        (site / "sitecustomize.py").write_text("import os\n")
        expected = "sitecustomize.py: outside the guard's package"
    elif attack == "pth":
        (site / "vllm_hotfix_guard" / "evil.pth").write_text("import os\n")
        expected = "evil.pth: not a Python source of the guard's package"
    elif attack == "over vllm":  # mounted over a locked file's own path
        target = site / "vllm" / "config" / "cache.py"
        target.parent.mkdir(parents=True)
        target.write_text("# not the fix\n")
        expected = "cache.py: outside the guard's package"
    else:
        lock = load_lock(export / "hotfix.lock")
        (export / "hotfix.lock").write_bytes(dump_lock(lock.__class__(site_packages=lock.site_packages,
                                                                      hotfixes=lock.hotfixes)))
        expected = "the lock names no guard files"
    if attack != "lock names none":
        _reseal(site)
    compose = tmp_path / "docker-compose.yml"
    compose.write_text("services:\n  vllm:\n    image: x\n")
    base = tmp_path / "base.yaml"
    base.write_text(DEPLOYMENT)
    runs = {
        "compose": ("compose", "--service", "vllm", "--export-dir", export, "--file", compose),
        "k8s": ("k8s", "--export-dir", export, "--base", base, "--to", tmp_path / "overlay", "--workload",
                "deployment/vllm", "--container", "vllm"),
        "pack": ("pack", "--export-dir", export, "--to", tmp_path / "bundle"),
        "bake": ("bake", "--export-dir", export, "--base", "docker.io/vllm/vllm-openai:v0.30.0", "--to", tmp_path / "ctx"),
    }
    for name, args in runs.items():
        done = run_hotfix(*args)
        assert done.returncode == 8 and expected in done.stderr, (name, done.returncode, done.stderr)
    assert compose.read_text() == "services:\n  vllm:\n    image: x\n"
    assert not any((tmp_path / d).exists() for d in ("overlay", "bundle", "ctx"))


def test_the_lock_names_the_guard_and_reads_it_back(dist):
    from vllm_hotfix_guard.errors import InvalidInput
    from vllm_hotfix_guard.txn.hotfix_lock import Lock, LockedFile, LockedHotfix, dump_lock, parse_lock

    files = guard_dist.locked_files(dist)
    assert [rel for rel, _ in files] == sorted(rel for rel, _ in dist.files)
    hotfix = LockedHotfix("h", 1, "vllm", "vllm", "0.30.0", None, (LockedFile("vllm/a.py", "a" * 64, None, "h/a.py"),))
    lock = Lock(site_packages="/site", hotfixes=(hotfix,), guard=files)
    assert parse_lock(dump_lock(lock)).guard == files
    for bad, message in [("sitecustomize.py", "outside the guard's package"),
                         ("vllm_hotfix_guard/../x.py", "unsafe"),
                         ("vllm_hotfix_guard-0.1.0.dist-info/INSTALLER", "not one of the guard's metadata files")]:
        doc = json.loads(dump_lock(lock))
        doc["guard"]["files"].append({"path": bad, "sha256": "b" * 64})
        with pytest.raises(InvalidInput, match="guard.files"):
            parse_lock(json.dumps(doc).encode())
