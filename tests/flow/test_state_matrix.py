"""One verdict: for each state an install can be in, every reader gives the same word and the same
fingerprint, and no reader exits 0 while a recorded file does not hold its fix -- on real vLLM installs.

Readers: `status` (text, --json, --all), `verify` (all, ID), `verify --lock` and the guard with that lock,
the guard with HOTFIX_REQUIRE (the test catalog at hand: HOTFIX_CATALOG), doctor's join with the target, `contains`
and `audit`. A record and a lock
are two claims: the record's readers (status, verify, the guard's HOTFIX_REQUIRE, doctor) give one word,
the lock's readers (verify --lock, the guard with the lock) another one, and where the lock holds exactly
the recorded hotfixes the fingerprints of all of them agree. `contains` answers by content (`applied` by
the record only when the record's verdict is in effect); `audit` is pristine or not, and names stale
bytecode and the recorded hotfixes that are not in effect.

Hotfixes (a test catalog on vLLM's real files, range >=0.30.0,<0.32.0, fixed in 0.32.0): ``two-files``
(vllm/envs.py + vllm/version.py), ``top-note`` on top of it in envs.py, ``mid-note`` (another line of
envs.py); ``from-release`` is `hotfix new --from-release vllm==0.25.1` for 0.25.0 (its files are 0.25.1's).
Each row's advice lines are then run as printed (test_every_printed_next_step_runs_as_pasted).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import realdata
from fixtures import crash
from fixtures.bytecode import stale_pyc
from fixtures.series import edit_diff, write_catalog
from fixtures.twofiles import ENVS, VERSION, make_two_file_patch, snapshot, top_note_diff

pytestmark = [pytest.mark.real, pytest.mark.slow]

A, B, C, R = "two-files", "top-note", "mid-note", "from-release"
SRC = Path(__file__).resolve().parents[2] / "src"
SIGNATURE = """
[[signatures]]
pattern = 'two-files test crash marker'
role = "error-line"
tier = "specific"
weight = 0.6
explain = "the test crash this hotfix fixes"
"""
LOG = ("ERROR 12-01 10:00:05 [core.py:868] EngineCore encountered a fatal error.\n"
       "ERROR 12-01 10:00:05 [core.py:868] RuntimeError: two-files test crash marker\n")
MID_OLD = b"    # ================== Installation Time Env Vars ==================\n"
MID_NEW = b"    # ================== Installation Time Env Vars (mid-note) ==================\n"

# row -> (vLLM release, the record's word for A (None: no record), the lock's word, the hotfixes recorded)
ROWS = {
    "clean":               ("0.30.0", None, "lost", ()),
    "applied":             ("0.30.0", "applied", "applied", (A,)),
    "two-on-one-file":     ("0.30.0", "applied", "applied", (A, B)),
    "middle-rolled-back":  ("0.30.0", "applied", "applied", (A, C)),
    "file-reinstalled":    ("0.30.0", "drifted", "drifted", (A,)),
    "edited-by-hand":      ("0.30.0", "drifted", "drifted", (A,)),
    "deleted":             ("0.30.0", "drifted", "drifted", (A,)),
    "upgraded-equal-file": ("0.25.1", "fixed-upstream", "fixed-upstream", (R,)),
    "upgraded-other-file": ("0.31.0", "stale", "stale", (A,)),
    "killed-series-apply": ("0.30.0", "interrupted", "interrupted", (A,)),
    "forged-top":          ("0.30.0", "unknown", "drifted", (A,)),
    "forged-top-and-patch": ("0.30.0", "unknown", "drifted", (A,)),
    "forged-unsealed":     ("0.30.0", "unknown", "drifted", (A,)),
    "forged-resealed":     ("0.30.0", "unknown", "drifted", (A,)),  # the catalog's pin (issue 43)
    "forged-garbage":      ("0.30.0", "unknown", "applied", (A,)),
    "forged-no-change":    ("0.30.0", "unknown", "lost", (A,)),
    "stale-bytecode":      ("0.30.0", "stale-bytecode", "stale-bytecode", (A,)),
    "fixed-upstream":      ("0.32.0", None, "fixed-upstream", ()),
    "checkout":            ("checkout", "applied", None, (A,)),
}
IN_EFFECT = ("applied", "fixed-upstream")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The catalog, the crash log and the locks (exported once per set of hotfixes and release)."""
    base = tmp_path_factory.mktemp("verdict")
    template = realdata.vllm_template("0.30.0")
    two = make_two_file_patch(template.site_packages, base / "diff").read_bytes()
    envs = (template.site_packages / ENVS).read_bytes()
    top = top_note_diff(template.site_packages, base / "top")
    mid = edit_diff({ENVS: envs}, {ENVS: (MID_OLD, MID_NEW)}, base / "mid")
    catalog = write_catalog(base / "catalog", {A: (two, SIGNATURE), B: (top, ""), C: (mid, "")})
    for hotfix_id in (A, B, C):
        manifest = catalog / "manifests" / f"{hotfix_id}.toml"
        manifest.write_text(manifest.read_text().replace('versions = "==0.30.0"', 'versions = ">=0.30.0,<0.32.0"'))
    made = subprocess.run(crash.hotfix_argv("new", R, "--from-release", "vllm==0.25.1", "--out", catalog),
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    manifest = catalog / "manifests" / f"{R}.toml"
    manifest.write_text(manifest.read_text() + SIGNATURE.replace("two-files", R))
    (base / "crash.log").write_text(LOG)
    (base / "crash-r.log").write_text(LOG.replace("two-files", R))
    locks: dict = {}

    def lock(ids: tuple, release: str) -> Path:
        if (ids, release) not in locks:
            venv = realdata.copy_venv(realdata.vllm_template(release), tmp_path_factory.mktemp("pristine") / "venv")
            out = tmp_path_factory.mktemp("export")
            done = subprocess.run(crash.hotfix_argv("export", *ids, "--to", out, "--python", venv.python,
                                                    "--catalog", catalog), capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            locks[(ids, release)] = out / "hotfix.lock"
        return locks[(ids, release)]

    return {"catalog": catalog, "logs": {A: base / "crash.log", R: base / "crash-r.log"}, "lock": lock}


def _hotfix(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(crash.hotfix_argv(*args), capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, done.stdout + done.stderr
    return done


GUARD = r'''
import json, sys
sys.path.append(sys.argv[1])
from vllm_hotfix_guard import derive as guard
out = {}
for mode, lock, require in (("lock", sys.argv[2] or None, ()), ("require", None, tuple(sys.argv[3:]))):
    if (mode == "lock" and lock) or (mode == "require" and require):
        verdicts, _, fingerprint = guard.check_all(lock=lock, require=require)
        out[mode] = {"verdicts": [v.as_dict() for v in verdicts], "fingerprint": fingerprint}
print(json.dumps(out))
'''


def guard_verdicts(python: str, lock: Path | None, require: tuple, env: dict) -> dict:
    done = subprocess.run([python, "-c", GUARD, str(SRC), str(lock or ""), *require], capture_output=True, text=True,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def word_of(detail: str) -> str:
    return detail.split(":", 1)[0]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def state_file() -> Path:
    (found,) = (Path(os.environ["HOTFIX_STATE_DIR"]) / "targets").glob("*/state.json")
    return found


def edit_record(change) -> None:
    """A hand edit of state.json (the record keeps its seal: what a tool or a person that knows nothing of
    seals leaves)."""
    doc = json.loads(state_file().read_text())
    change(doc)
    state_file().write_text(json.dumps(doc, indent=2))


def make_checkout(root: Path, template: realdata.Venv) -> Path:
    """A git checkout of vLLM's two files (static version 0.30.0), importable with PYTHONPATH=root."""
    for rel in (ENVS, VERSION, "vllm/_version.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes((template.site_packages / rel).read_bytes())
    (root / "vllm" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text('[project]\nname = "vllm"\nversion = "0.30.0"\n')
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "vllm 0.30.0"]):
        subprocess.run(["git", "-C", str(root), *argv], check=True, env=env, capture_output=True)
    return root


def make_row(row: str, world, tmp_path: Path) -> dict:
    """Build the row's install; returns how to name it (options, env) and what its readers see."""
    catalog = world["catalog"]
    release, _, _, recorded = ROWS[row]
    if row == "checkout":
        root = make_checkout(tmp_path / "vllm-src", realdata.vllm_template("0.30.0"))
        options = ("--root", str(root), "--catalog", str(catalog))
        ok(_hotfix("apply", A, *options))
        return {"options": options, "env": {"PYTHONPATH": str(root)}, "python": sys.executable, "root": root,
                "files": root}
    first = "0.25.0" if row == "upgraded-equal-file" else "0.30.0" if row == "upgraded-other-file" else release
    venv = realdata.copy_venv(realdata.vllm_template(first), tmp_path / "venv")
    sp = venv.site_packages
    options = ("--python", str(venv.python), "--catalog", str(catalog))
    pristine = snapshot(sp) if first == "0.30.0" else None
    for hotfix_id in (recorded if row != "middle-rolled-back" else (A, B, C)):
        ok(_hotfix("apply", hotfix_id, *options))
    if row == "middle-rolled-back":
        ok(_hotfix("rollback", B, *options))
    if row == "file-reinstalled":
        (sp / VERSION).write_bytes(pristine[VERSION])
    if row == "edited-by-hand":
        (sp / ENVS).write_bytes((sp / ENVS).read_bytes().replace(b"marker one", b"marker edited by hand"))
    if row == "deleted":
        (sp / VERSION).unlink()
    if row.startswith("upgraded"):  # a real `pip install` of the next release over the patched one
        realdata.pip_install(venv, str(realdata.vllm_wheel(release)))
    if row == "killed-series-apply":  # SIGKILL at the rename of envs.py while B goes on top of A
        argv = crash.hotfix_argv("apply", B, *options)
        at = crash.after_switching(argv, sp / ENVS, tmp_path / "trace.log")
        ok(_hotfix("rollback", B, *options))
        assert crash.run_with(argv, "rename", at, "signal=SIGKILL").returncode != 0
    reverted = (sp / ENVS).read_bytes().replace(b"# hotfix: two-file test, marker one\n", b"# reverted by hand\n")
    if row.startswith("forged-top") or row == "forged-resealed":  # a hand edit that reverts the fix, and a record that calls it the top
        (sp / ENVS).write_bytes(reverted)
        edit_record(lambda doc: doc["series"][0]["files"][0].update(after_sha256=sha256(reverted)))
    if row in ("forged-top-and-patch", "forged-resealed"):  # ... and the kept patch rewritten to give exactly those bytes
        _rewrite_kept_patch(pristine[ENVS], reverted, pristine[VERSION], (sp / VERSION).read_bytes())
    if row == "forged-resealed":  # ... and its sha256 and the seal recomputed: only the catalog's pin tells
        _reseal()
    if row == "forged-unsealed":  # the first one as a record from before seals: the guard derives it in full
        (sp / ENVS).write_bytes(reverted)

        def unsealed(doc):
            doc["series"][0]["files"][0]["after_sha256"] = sha256(reverted)
            doc["series"][0]["seal"] = None
            doc["series"][0]["patch_sha256"] = []
        edit_record(unsealed)
    if row == "forged-garbage":  # a correctly patched file, a record whose top hash is nobody's
        edit_record(lambda doc: doc["series"][0]["files"][0].update(after_sha256="ab" * 32))
    if row == "forged-no-change":  # a pristine file, a record that says the hotfix wrote those very bytes
        realdata.pip_install(venv, "--force-reinstall", str(realdata.vllm_wheel("0.30.0")))
        edit_record(lambda doc: doc["series"][0]["files"][0].update(after_sha256=sha256(pristine[ENVS])))
    if row == "stale-bytecode":  # a pyc of the pre-fix code, whose header names the patched file's mtime and size
        _stale_pyc(venv.python, sp / ENVS, pristine[ENVS])
    return {"options": options, "env": {}, "python": str(venv.python), "root": sp, "files": sp, "venv": venv}


def _reseal() -> None:
    from vllm_hotfix_guard.txn.state import TargetState, seal_of

    (kept,) = (state_file().parent / "patches" / A).glob("*.patch")
    edit_record(lambda doc: doc["series"][0].update(patch_sha256=[sha256(kept.read_bytes())]))
    state = TargetState.load(state_file().parent)
    edit_record(lambda doc: doc["series"][0].update(seal=seal_of(state.target, state.hotfixes[A])))


def _rewrite_kept_patch(envs_before: bytes, envs_after: bytes, version_before: bytes, version_after: bytes) -> None:
    """The kept patch of A replaced by a real diff that gives the forged bytes."""
    work = state_file().parent / "forge"
    for side, (envs, version) in (("a", (envs_before, version_before)), ("b", (envs_after, version_after))):
        for rel, data in ((ENVS, envs), (VERSION, version)):
            (work / side / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / side / rel).write_bytes(data)
    diff = subprocess.run(["diff", "-ruN", "a", "b"], cwd=work, capture_output=True).stdout
    (kept,) = (state_file().parent / "patches" / A).glob("*.patch")
    kept.write_bytes(diff)
    subprocess.run(["rm", "-rf", str(work)], check=True)


def _stale_pyc(python: Path, source: Path, old: bytes) -> None:
    (source.parent / "old.bytes").write_bytes(old)
    stale_pyc(python, source, source.parent / "old.bytes")
    (source.parent / "old.bytes").unlink()


def read_everything(row: str, made: dict, world) -> dict:
    """Every reader on the row's install: {reader: (word, exit code, fingerprint or None, advice lines)}."""
    release, _, lock_word, recorded = ROWS[row]
    options, env = made["options"], made["env"]
    main = recorded[0] if recorded else (R if release == "0.25.1" else A)
    out: dict = {}

    def advice_of(text: str) -> list[str]:
        return re.findall(r"`(hotfix [^`]+)`", text)

    done = _hotfix("status", *(() if recorded else (main,)), *options, "--json", env=env)  # the recorded series
    entries = {e["id"]: e for e in json.loads(done.stdout)}
    out["status --json"] = (entries[main]["state"], done.returncode, entries[main]["fingerprint"],
                            advice_of(entries[main]["advice"] or ""))
    line = rf"^ *(?:ok|--|!!) +(?:\d+\.)? +{re.escape(main)} +([\w-]+)"
    done = _hotfix("status", *options, env=env)
    word = re.search(line, done.stdout, re.M)
    fp = re.search(r"^fingerprint: (\S+)", done.stdout, re.M)
    out["status"] = (word.group(1) if word else None, done.returncode, fp.group(1) if fp and recorded else None,
                     advice_of(done.stdout))
    done = _hotfix("status", "--all", "--catalog", world["catalog"], env=env)
    word = re.search(line, done.stdout, re.M)
    fp = re.search(r"^  fingerprint: (\S+)", done.stdout, re.M)
    out["status --all"] = (word.group(1) if word else None, done.returncode, fp.group(1) if fp else None,
                           advice_of(done.stdout))
    done = _hotfix("status", "--all", "--catalog", world["catalog"], "--json", env=env)
    targets = [t for t in json.loads(done.stdout)["targets"] if t["hotfixes"]]
    entry = next((h for t in targets for h in t["hotfixes"] if h["id"] == main), None)
    out["status --all --json"] = (entry["state"] if entry else None, done.returncode,
                                  targets[0]["fingerprint"] if targets else None, [])
    done = _hotfix("verify", *options, "--json", env=env)
    if recorded:
        entries = {e["id"]: e for e in json.loads(done.stdout)}
        out["verify"] = (entries[main]["state"], done.returncode, entries[main]["fingerprint"], [])
    else:
        out["verify"] = (None, done.returncode, None, [])
    done = _hotfix("verify", *(recorded or (main,)), *options, env=env)  # each named
    word = re.search(rf"(?:in effect: {main}@\S+ \(([\w-]+)|NOT IN EFFECT: {main} is ([\w-]+))", done.stdout)
    fp = re.search(r"^fingerprint: (\S+)", done.stdout, re.M)
    out["verify ID"] = ((word.group(1) or word.group(2)) if word else None, done.returncode,
                        fp.group(1) if fp and recorded else None, advice_of(done.stdout))
    lock = None
    if lock_word is not None:
        lock = world["lock"](recorded or (main,), "0.25.0" if release == "0.25.1" else
                             "0.30.0" if release in ("0.31.0", "0.32.0") else release)
        python = ("--python", made["python"], "--catalog", world["catalog"])  # the catalog its advice names
        done = _hotfix("verify", "--lock", lock, *python, "--json", env=env)
        (entry,) = [e for e in json.loads(done.stdout) if e["id"] == main]
        out["verify --lock"] = (entry["state"], done.returncode, entry["fingerprint"], advice_of(entry["advice"] or ""))
        done = _hotfix("verify", "--lock", lock, *python, env=env)
        fp = re.search(r"^fingerprint: (\S+)", done.stdout, re.M)
        out["verify --lock (text)"] = (None, done.returncode, fp.group(1) if fp else None, advice_of(done.stdout))
    guard = guard_verdicts(made["python"], lock, recorded or (main,), {**env, "HOTFIX_CATALOG": str(world["catalog"])})
    if lock is not None:
        (verdict,) = [v for v in guard["lock"]["verdicts"] if v["hotfix_id"] == main]
        out["guard lock"] = ("applied" if verdict["in_effect"] and not verdict["detail"] else word_of(verdict["detail"]),
                             0 if all(v["in_effect"] for v in guard["lock"]["verdicts"]) else 1,
                             guard["lock"]["fingerprint"], advice_of(verdict["remedy"]))
    if recorded or release != "0.32.0":  # nothing recorded: "not-applied" (the guard knows no catalog)
        (verdict,) = [v for v in guard["require"]["verdicts"] if v["hotfix_id"] == main]
        out["guard require"] = ("applied" if verdict["in_effect"] and not verdict["detail"] else word_of(verdict["detail"]),
                                0 if all(v["in_effect"] for v in guard["require"]["verdicts"]) else 1,
                                guard["require"]["fingerprint"], advice_of(verdict["remedy"]))
    done = _hotfix("doctor", world["logs"][main], *options, "--json", env=env)
    (named,) = [v for v in json.loads(done.stdout)["verdicts"] if v["id"] == main]
    out["doctor"] = (named["state"], done.returncode, None, [named["next"]] if (named["next"] or "").startswith("hotfix ") else [])
    done = _hotfix("contains", main, *options, "--json", env=env)
    out["contains"] = (json.loads(done.stdout).get("state", "refused"), done.returncode, None, [])
    if made.get("venv") is not None:
        done = _hotfix("audit", "vllm", "--python", made["python"], "--json", env=env)
        report = json.loads(done.stdout)
        out["audit"] = ("pristine" if report["pristine"] else "stale-bytecode" if any(
            d["kind"] == "stale-bytecode" for d in report["differences"]) else "not-pristine", done.returncode,
            report.get("fingerprint"), [])
    return out


RECORD_READERS = ("status --json", "status", "status --all", "status --all --json", "verify", "verify ID",
                  "guard require", "doctor")
LOCK_READERS = ("verify --lock", "verify --lock (text)", "guard lock")


@pytest.mark.parametrize("row", list(ROWS))
def test_every_reader_gives_one_verdict(row, world, tmp_path):
    made = make_row(row, world, tmp_path)
    seen = read_everything(row, made, world)
    release, record_word, lock_word, recorded = ROWS[row]
    words = {reader: seen[reader][0] for reader in RECORD_READERS if reader in seen and seen[reader][0] is not None}
    if record_word is None:  # nothing recorded: status of the named hotfix and doctor judge its files
        words.pop("verify", None)
    wanted = record_word or ("fixed-upstream" if release == "0.32.0" else "not-applied")
    assert set(words.values()) == {wanted}, (row, words)
    locked = {reader: seen[reader][0] for reader in LOCK_READERS if reader in seen and seen[reader][0] is not None}
    assert set(locked.values()) <= {lock_word}, (row, locked)
    fingerprints = {reader: seen[reader][2] for reader in seen if seen[reader][2] is not None}
    same_set = lock_word is not None and recorded
    compared = {r: fp for r, fp in fingerprints.items() if r not in LOCK_READERS or same_set}
    assert len(set(compared.values())) <= 1 or not recorded, (row, compared)  # of what is recorded
    for reader, (word, code, _, _) in seen.items():  # exit codes follow the printed verdict
        if word is None or reader in ("audit", "contains") or (not recorded and reader.startswith("status")):
            continue  # (with nothing recorded, `status` only informs: exit 0)
        if reader == "doctor":
            assert code in ((0,) if word in IN_EFFECT else (1, 9)), (row, reader, word, code)
        else:
            assert (code == 0) == (word in IN_EFFECT), (row, reader, word, code)
    holds = wanted in IN_EFFECT or row == "forged-garbage"  # there the record lies, the files hold the fix
    if seen["contains"][1] == 0:  # by content: it may say "contained" only where the files hold the fix
        assert holds, (row, seen["contains"])
    if "audit" in seen and seen["audit"][1] == 0:  # pristine, and no record says a fix belongs there
        assert seen["audit"][0] == "pristine" and (not recorded or wanted == "fixed-upstream"), (row, seen["audit"])
    if row == "stale-bytecode":
        assert seen["audit"][0] == "stale-bytecode" and seen["contains"][0] == "stale-bytecode", seen
    if row == "killed-series-apply":  # a confident match printed: its exit code follows it, not "no match" (9)
        assert seen["doctor"][1] == 1, seen["doctor"]
    steps = {line: reader for reader, (_, _, _, lines) in seen.items() for line in lines}
    for step, reader in sorted(steps.items()):  # every next step it printed runs as pasted: never a usage error, never an unknown id
        env = {**os.environ, **made["env"]}
        if reader.startswith("guard") and "--catalog" not in step:  # printed in the guard's environment
            env["HOTFIX_CATALOG"] = str(world["catalog"])
        done = subprocess.run([sys.executable, "-m", "vllm_hotfix", *shlex.split(step)[1:]], capture_output=True,
                              text=True, env=env, timeout=600, cwd=tmp_path)
        assert done.returncode != 2 and "unknown hotfix" not in done.stderr and "No such option" not in done.stderr, \
            (row, reader, step, done.stderr)


def test_in_a_container_status_and_verify_say_the_lock_s_words(world, tmp_path):
    """HOTFIX_LOCK set, nothing recorded (the image's install, the file back to pristine): `verify` reads the
    lock (its default) and `status` judges the locked hotfix by it too -- "lost", the bind mount missing,
    and the advice to put the mount back, never `hotfix apply` on the image."""
    venv = realdata.copy_venv(realdata.vllm_template("0.30.0"), tmp_path / "venv")
    lock = world["lock"]((A,), "0.30.0")
    env = {"HOTFIX_LOCK": str(lock)}
    options = ("--python", str(venv.python), "--catalog", str(world["catalog"]))
    verify = _hotfix("verify", *options, env=env)
    assert verify.returncode == 1 and f"NOT IN EFFECT: {A}@1 is lost" in verify.stdout, verify.stdout
    done = _hotfix("status", A, *options, "--json", env=env)
    (entry,) = json.loads(done.stdout)
    assert (entry["state"], done.returncode) == ("lost", 1), entry
    assert "the bind mount is missing" in entry["advice"] and "hotfix apply" not in entry["advice"], entry
