"""hotfix.lock: strict loading, byte-stable dumping, per-file states against real files on disk."""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

import pytest

from vllm_hotfix_guard.txn import hotfix_lock, lock_check
from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix_guard.txn.hotfix_lock import Lock, LockedFile, LockedHotfix
from vllm_hotfix_guard.txn.lock_check import Installed

from fixtures.codenames import locked_code

PATH = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
PRISTINE = b"x = a // self.cache_config.block_size\n"
PATCHED = b"x = a // self._mamba_block_size\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_lock(fixed_in: str | None = "0.32.0", *, named: bool = True) -> Lock:
    """The lock `hotfix export` writes (its code names: module-level lines only, none); ``named=False``: one
    written before code names were locked."""
    code = locked_code(PATH, PRISTINE, PATCHED) if named else None
    locked = LockedFile(PATH, sha(PATCHED), sha(PRISTINE), f"mamba-align-block-size/{PATH}", code)
    hotfix = LockedHotfix("mamba-align-block-size", 1, "vllm", "vllm", "0.30.0", fixed_in, (locked,))
    return Lock(site_packages="/usr/local/lib/python3.12/site-packages", hotfixes=(hotfix,), generator="test")


def install(tmp_path: Path, content: bytes | None, version: str = "0.30.0") -> Installed:
    package_dir = tmp_path / "site-packages" / "vllm"
    target = package_dir / PATH.partition("/")[2]
    target.parent.mkdir(parents=True, exist_ok=True)
    if content is not None:
        target.write_bytes(content)
    return Installed(package_dir, version)


def test_dump_then_load_round_trips_and_is_stable(tmp_path):
    lock = make_lock()
    data = hotfix_lock.dump_lock(lock)
    (tmp_path / "hotfix.lock").write_bytes(data)
    loaded = hotfix_lock.load_lock(tmp_path / "hotfix.lock")
    assert loaded == lock
    assert hotfix_lock.dump_lock(loaded) == data
    assert json.loads(data)["hotfixes"][0]["files"][0]["path"] == PATH


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda d: d.pop("site_packages"), "site_packages"),
        (lambda d: d.update(schema=2), "schema"),
        (lambda d: d["hotfixes"][0].update(package=3), "hotfixes[0].package"),
        (lambda d: d["hotfixes"][0]["files"][0].update(sha256="abc"), "hotfixes[0].files[0].sha256"),
        (lambda d: d["hotfixes"][0]["files"][0].update(path="../etc/passwd"), "hotfixes[0].files[0].path"),
        (lambda d: d["hotfixes"][0]["files"][0].update(export="/abs"), "hotfixes[0].files[0].export"),
    ],
)
def test_invalid_lock_names_file_and_key_path(tmp_path, mutate, key):
    doc = json.loads(hotfix_lock.dump_lock(make_lock()))
    mutate(doc)
    path = tmp_path / "hotfix.lock"
    path.write_text(json.dumps(doc))
    with pytest.raises(InvalidInput) as err:
        hotfix_lock.load_lock(path)
    assert str(path) in err.value.message and key in err.value.message


def test_not_json_names_line(tmp_path):
    path = tmp_path / "hotfix.lock"
    path.write_text('{\n  "schema": 1,\n  oops\n}')
    with pytest.raises(InvalidInput, match=r"hotfix.lock:3: not JSON"):
        hotfix_lock.load_lock(path)


def test_missing_lock_file_says_how_to_make_one(tmp_path):
    with pytest.raises(InvalidInput) as err:
        hotfix_lock.load_lock(tmp_path / "nope.lock")
    assert "hotfix export" in err.value.hint


@pytest.mark.parametrize(
    "content, version, state",
    [
        (PATCHED, "0.30.0", "applied"),
        (PRISTINE, "0.30.0", "lost"),
        (b"something else\n", "0.30.0", "drifted"),
        (None, "0.30.0", "drifted"),  # the same word `hotfix status` uses for a missing file
        (PRISTINE, "0.32.0", "fixed-upstream"),
        (PRISTINE, "0.33.0rc1", "fixed-upstream"),
        (PRISTINE, "0.32.0rc1", "stale"),
        (PATCHED, "0.30.0+cu126", "applied"),  # a local label names the same release
        (PATCHED, "0.31.0", "stale"),  # another release under the lock: its files' bytes are 0.30.0's
    ],
)
def test_states_against_files_on_disk(tmp_path, content, version, state):
    (check,) = lock_check.check_lock(make_lock(), lambda package: install(tmp_path, content, version))
    assert check.state == state
    assert check.in_effect == (state in ("applied", "fixed-upstream"))
    advice = lock_check.advice(check, lambda locked, fc: f"./x/{locked.export}:{fc.where}:ro")
    if state == "stale":
        assert advice.startswith(f"vllm is {version} here, the lock was exported from 0.30.0: re-export")
    elif state == "lost":
        assert advice.startswith(f"lost: {PATH} is the pristine 0.30.0 file: the bind mount is missing")
        assert f"- ./x/mamba-align-block-size/{PATH}:" in advice
    if state == "fixed-upstream":
        assert "drop the mamba-align-block-size bind mounts" in advice
    assert (advice is None) == (state == "applied")


@pytest.mark.parametrize("version, state", [("0.31.1", "fixed-upstream"), ("0.32.0", "stale"), ("0.33.0rc1", "fixed-upstream")])
def test_a_fixed_in_union_decides_the_lock_and_round_trips(tmp_path, version, state):
    """fixed_in on parallel lines (core/pep440.fixed_by): 0.32.0 is not in it, so it is another release."""
    lock = make_lock(">=0.31.1,<0.32.0 || >=0.33.0rc1")
    (tmp_path / "hotfix.lock").write_bytes(hotfix_lock.dump_lock(lock))
    assert hotfix_lock.load_lock(tmp_path / "hotfix.lock") == lock
    (check,) = lock_check.check_lock(lock, lambda package: install(tmp_path, PRISTINE, version))
    assert check.state == state


def test_package_not_installed_is_unknown_with_advice():
    (check,) = lock_check.check_lock(make_lock(), lambda package: None)
    assert check.state == "unknown"
    assert "not found" in lock_check.advice(check, lambda *a: "")


def test_select_unknown_id_lists_known():
    with pytest.raises(InvalidInput) as err:
        make_lock().select(["nope"])
    assert "mamba-align-block-size" in err.value.hint


def test_module_imports_only_the_stdlib():
    """The in-process guard imports it inside vLLM processes: nothing outside the stdlib and errors.py."""
    import vllm_hotfix_guard.errors as errors_module

    for module in (hotfix_lock, errors_module):
        tree = ast.parse(Path(module.__file__).read_text())
        imported = {
            (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
            for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in node.names
        }
        assert imported <= {"__future__", "hashlib", "json", "os", "re", "stat", "dataclasses", "pathlib", "typing",
                            "enum", "vllm_hotfix_guard"}, imported


@pytest.mark.parametrize("change, key", [
    (lambda h: h.update(id="fix\nINFO forged guard line"), "hotfixes[0].id: not a hotfix id"),
    (lambda h: h.update(id="\x1b[32mfix"), "hotfixes[0].id: not a hotfix id"),
    (lambda h: h.update(fixed_in="0"), "hotfixes[0].fixed_in: '0' already holds the exported baseline"),
    (lambda h: h.update(fixed_in=">=0.29,<0.31 || >=0.32"), "hotfixes[0].fixed_in: '>=0.29,<0.31 || >=0.32' already holds"),
    (lambda h: h.update(fixed_in=">=0.32 || <0.29"), "hotfixes[0].fixed_in: '<0.29' has no lower bound"),
    (lambda h: h.update(package="this.x"), "hotfixes[0].package: expected a top-level import name"),
    (lambda h: h.update(versions=">=0.31"), "hotfixes[0].versions: the exported baseline '0.30.0' is outside"),
])
def test_lock_fields_that_would_forge_a_line_pass_everything_or_import_a_module_are_refused(tmp_path, change, key):
    doc = json.loads(hotfix_lock.dump_lock(make_lock()))
    change(doc["hotfixes"][0])
    path = tmp_path / "hotfix.lock"
    path.write_text(json.dumps(doc))
    with pytest.raises(InvalidInput) as err:
        hotfix_lock.load_lock(path)
    assert key in err.value.message, err.value.message


# -- the code a locked file's fix changes (issue 35) ------------------------------------------------

CODE = {"interpreter": "cpython-311", "names": [
    {"name": "MambaHybridModelState.add_request", "kind": "method", "fingerprint": "a" * 64},
    {"name": "MambaHybridModelState", "kind": "class", "fingerprint": None}]}


def lock_doc(code) -> dict:
    doc = json.loads(hotfix_lock.dump_lock(make_lock(named=False)))
    doc["hotfixes"][0]["files"][0]["code"] = code
    return doc


def test_code_names_round_trip_and_a_lock_without_them_loads_as_before(tmp_path):
    loaded = hotfix_lock.parse_lock(json.dumps(lock_doc(CODE)).encode())
    code = loaded.hotfixes[0].files[0].code
    assert code.interpreter == "cpython-311"
    assert [(n.name, n.kind, n.fingerprint) for n in code.names] == [
        ("MambaHybridModelState.add_request", "method", "a" * 64), ("MambaHybridModelState", "class", None)]
    assert hotfix_lock.parse_lock(hotfix_lock.dump_lock(loaded)) == loaded
    assert json.loads(hotfix_lock.dump_lock(loaded))["hotfixes"][0]["files"][0]["code"] == CODE
    old = hotfix_lock.parse_lock(hotfix_lock.dump_lock(make_lock(named=False)))
    assert old.hotfixes[0].files[0].code is None
    assert "code" not in json.loads(hotfix_lock.dump_lock(old))["hotfixes"][0]["files"][0]  # additive: old locks unchanged


def named(**change) -> dict:
    names = [dict(CODE["names"][0], **change)]
    return {"interpreter": "cpython-311", "names": names}


@pytest.mark.parametrize("code, key, problem", [
    ("x", "code", "expected an object"),
    ({"names": []}, "code.interpreter", "missing"),
    ({"interpreter": "cpython 311", "names": []}, "code.interpreter", "not an interpreter cache tag"),
    ({"interpreter": "cpython-311"}, "code.names", "missing"),
    (named(name="os.system; x"), "code.names[0].name", "not a qualified name"),
    (named(name="A..b"), "code.names[0].name", "not a qualified name"),
    (named(kind="module"), "code.names[0].kind", "expected one of class, method, function"),
    (named(kind="method", name="add_request"), "code.names[0].kind", "a method is named Class.method"),
    (named(fingerprint="abc"), "code.names[0].fingerprint", "expected 64 lowercase hex digits"),
    ({"interpreter": "cpython-311", "names": [CODE["names"][0], CODE["names"][0]]}, "code.names[1].name", "named twice"),
    ({"interpreter": "cpython-311", "names": [dict(CODE["names"][0], name=f"f{i}") for i in range(513)]},
     "code.names", "513 names, at most 512"),
])
def test_code_names_are_strictly_validated(code, key, problem):
    with pytest.raises(InvalidInput) as exc:
        hotfix_lock.parse_lock(json.dumps(lock_doc(code)).encode(), source="hotfix.lock")
    assert f"hotfix.lock: hotfixes[0].files[0].{key}: " in exc.value.message and problem in exc.value.message


def test_a_file_that_is_not_python_has_no_code_names():
    doc = lock_doc(CODE)
    doc["hotfixes"][0]["files"][0]["path"] = "vllm/kernels/x.cu"
    with pytest.raises(InvalidInput, match=r"files\[0\]\.code: 'vllm/kernels/x.cu' is not a Python file"):
        hotfix_lock.parse_lock(json.dumps(doc).encode())


def test_the_expected_fingerprint_is_what_a_check_in_effect_gives(tmp_path):
    """expected_fingerprint (what a bundle is labelled with and admission approves) answers as
    fingerprint(check_lock(...)) does on an install where the lock is in effect -- also for a series,
    where the lower hotfix's file holds the upper one's bytes -- and differs once a byte differs."""
    top = PATCHED + b"# and the second fix\n"
    second = LockedHotfix("second-fix", 2, "vllm", "vllm", "0.30.0", None,
                          (LockedFile(PATH, sha(top), sha(PATCHED), f"second-fix/{PATH}", locked_code(PATH, PATCHED, top)),
                           LockedFile("vllm/other.py", sha(b"new\n"), None, "second-fix/vllm/other.py",
                                      locked_code("vllm/other.py", b"", b"new\n"))))
    lock = hotfix_lock.parse_lock(hotfix_lock.dump_lock(Lock(make_lock().site_packages, (*make_lock().hotfixes, second))))
    installed = install(tmp_path, top)
    (installed.package_dir / "other.py").write_bytes(b"new\n")
    checks = lock_check.check_lock(lock, lambda package: installed)
    assert all(c.in_effect for c in checks)
    assert lock_check.fingerprint(checks) == lock_check.expected_fingerprint(lock)
    (installed.package_dir / "other.py").write_bytes(b"new!\n")
    assert lock_check.fingerprint(lock_check.check_lock(lock, lambda package: installed)) != lock_check.expected_fingerprint(lock)
