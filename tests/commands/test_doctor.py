"""`hotfix doctor` through the real CLI: log files, stdin, gzip, --json, exit codes, the join with a target."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from fixtures.ascend import make_vllm_ascend_checkout
from fixtures.qwen import make_qwen_standin
from test_apply_hotfix import _standin_catalogs
from test_manifest import write_manifest
from test_manifest_signatures import advisory_data

LOGS = Path(__file__).resolve().parents[1] / "doctor" / "logs"
MAMBA_LOGS = (LOGS / "001-mamba-align.log", LOGS / "001-dmesg.txt", LOGS / "001-cuda-gdb.txt")  # seed-001 shape + real cuda-gdb


def doctor(run_hotfix, *args, **kwargs):
    done = run_hotfix("doctor", *args, **kwargs)
    assert "Traceback" not in done.stderr
    return done


def test_001_without_a_target_names_mamba_from_the_logs_release(run_hotfix):
    done = doctor(run_hotfix, *MAMBA_LOGS)
    assert done.returncode == 1, done.stderr
    assert ("1. mamba-align-block-size: needed? state unknown → hotfix apply mamba-align-block-size "
            "(or upgrade vllm to 0.32.0, fixed upstream)") in done.stdout
    assert "the log's vllm 0.30.0 is affected" in done.stdout
    assert f"{MAMBA_LOGS[0]}:22" in done.stdout and "confident: specific evidence" in done.stdout
    assert f"specific  fault-report {MAMBA_LOGS[2]}:3" in done.stdout


def test_001_without_the_faulting_kernel_is_possible_and_says_how_to_confirm(run_hotfix, tmp_path):
    """The seed-001-shaped log (align mode, attention block size 1152, an illegal memory access in a
    worker, the sample_tokens RPC abort, Xid 13 and Xid 31 VIRT_READ): not confident, but mamba first,
    with what would confirm it and the dry run to paste, carrying the --python and --catalog given."""
    done = doctor(run_hotfix, *MAMBA_LOGS[:2])
    assert done.returncode == 9, done.stdout + done.stderr
    assert "→ hotfix apply" not in done.stdout and "possible (a generic error and a condition of the bug" in done.stdout
    assert "  - mamba-align-block-size @1:" in done.stdout.split("possible (", 1)[1].splitlines()[1]
    assert "check: the faulting kernel is the align-mode pre-copy" in done.stdout
    assert "confirm 1. restart the server with CUDA_LAUNCH_BLOCKING=1" in done.stdout
    assert "vllm:prefix_cache_hits_total" in done.stdout  # which counter shows a prefix resume
    assert "      then: hotfix apply mamba-align-block-size --dry-run\n" in done.stdout
    assert "paste the" not in done.stderr  # a candidate with its next steps is no dead end
    empty = tmp_path / "team catalog"
    (empty / "manifests").mkdir(parents=True)
    report = json.loads(doctor(run_hotfix, *MAMBA_LOGS[:2], "--python", "/opt/vllm env/bin/python", "--catalog", empty,
                               "--json").stdout)
    (verdict,) = [v for v in report["verdicts"] if v["id"] == "mamba-align-block-size"]
    assert verdict["level"] == "possible" and len(verdict["confirm"]) == 3
    assert verdict["then"] == (f"hotfix apply mamba-align-block-size --dry-run --python '/opt/vllm env/bin/python' "
                               f"--catalog '{empty}'")


def test_stdin_and_gzip_give_the_same_verdict_as_the_file(run_hotfix, tmp_path):
    packed = tmp_path / "server.log.gz"
    packed.write_bytes(gzip.compress(MAMBA_LOGS[0].read_bytes() + MAMBA_LOGS[2].read_bytes()))
    from_file = json.loads(doctor(run_hotfix, packed, "--json").stdout)
    from_stdin = doctor(run_hotfix, "-", "--json", input=MAMBA_LOGS[0].read_text() + MAMBA_LOGS[2].read_text(),
                        process=True)  # a real pipe on stdin
    assert from_stdin.returncode == 1
    piped = json.loads(from_stdin.stdout)
    assert piped["sources"] == ["<stdin>"] and from_file["sources"] == [str(packed)]
    for report in (from_file, piped):
        (verdict,) = [v for v in report["verdicts"] if v["named"]]
        assert (verdict["id"], verdict["state"], verdict["level"]) == ("mamba-align-block-size", "unknown", "confident")
        assert report["exit_code"] == 1 and report["log_versions"] == {"vllm": "0.30.0"}
        assert (verdict["next"], verdict["upgrade"]) == ("hotfix apply mamba-align-block-size", "vllm 0.32.0")


def test_json_carries_first_errors_and_evidence(run_hotfix):
    report = json.loads(doctor(run_hotfix, *MAMBA_LOGS, "--json").stdout)
    assert report["lines"] == 46
    assert {"source": str(MAMBA_LOGS[0]), "line": 16, "process": "Worker_TP0 pid=276"}.items() <= report["first_errors"][0].items()
    evidence = report["verdicts"][0]["evidence"]
    assert (evidence[0]["tier"], evidence[0]["line"]) == ("specific", 3)
    first = next(e for e in evidence if e["role"] == "first-error" and e["source"] == str(MAMBA_LOGS[0]))
    assert first["line"] == 22 and first["normalised"].endswith("CUDA error: an illegal memory access was encountered")
    assert any({"kind": "flag", "name": "enable_prefix_caching", "value": "True", "line": 2}.items() <= f.items()
               for f in report["facts"])
    assert all(e["explain"] for e in evidence)


@pytest.mark.parametrize("log, code, expected", [
    ("001-no-align.log", 9, "not a candidate: 1 catalog entry shares this log's generic errors, and the log shows none "
                            "of their trigger conditions"),
    ("001-vllm-0.24.0.log", 9, "ruled out: mamba-align-block-size (the log's vllm 0.24.0 is outside >=0.25.0,<0.32.0)"),
])
def test_negative_cases(run_hotfix, log, code, expected):
    extra = () if "no-align" in log else (LOGS / "001-cuda-gdb.txt",)  # the kernel only runs in align mode
    done = doctor(run_hotfix, LOGS / log, *extra)
    assert done.returncode == code, done.stdout + done.stderr
    assert expected in done.stdout


def test_a_log_of_a_release_with_the_fix_rules_it_out(run_hotfix, tmp_path):
    log = tmp_path / "0.32.log"
    log.write_text(MAMBA_LOGS[0].read_text().replace("0.30.0", "0.32.0"))
    done = doctor(run_hotfix, log, MAMBA_LOGS[2])
    assert done.returncode == 9, done.stdout
    assert "ruled out: mamba-align-block-size (the log's vllm 0.32.0 already contains the fix (0.32.0))" in done.stdout
    assert "paste the first error" not in done.stderr  # it is known: only not this release's


def test_000_507011_with_another_first_error_names_nothing(run_hotfix):
    done = doctor(run_hotfix, LOGS / "000-server.log", LOGS / "000-plog-other-first-error.log")
    assert done.returncode == 9 and "glm-conv-null-slot" not in done.stdout
    assert "aclnnFusedInferAttentionScoreV3 failed, error code 561002" in done.stdout  # shown as the first error


def test_000_on_the_checkout_needed_then_already_applied(run_hotfix, tmp_path):
    checkout = make_vllm_ascend_checkout(tmp_path / "vllm-ascend")
    kernel = tmp_path / "plog-kernel.log"  # the faulting kernel's name, as a plog reports it (unconfirmed signature)
    kernel.write_text("[ERROR] RUNTIME(5493,python3):2026-11-30-09:55:33.588.300 [task_info.cc:1010]5493 Aicore kernel "
                      "execute failed, device_id=15, stream_id=80, task_id=202, fault kernel_name=causal_conv1d_update_0\n")
    logs = (LOGS / "000-server.log", LOGS / "000-plog-5493.log", kernel)
    done = doctor(run_hotfix, *logs, "--root", checkout)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"glm-conv-null-slot: needed, not applied → hotfix apply glm-conv-null-slot --root {checkout}" in done.stdout
    assert "(pattern not yet confirmed on a real log)" in done.stdout
    assert run_hotfix("apply", "glm-conv-null-slot", "--root", checkout).returncode == 0
    done = doctor(run_hotfix, *logs, "--root", checkout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"glm-conv-null-slot: already applied → hotfix verify glm-conv-null-slot --root {checkout}" in done.stdout


def test_004_advisories_fixed_by_a_hotfix_version_join_with_the_recorded_version(run_hotfix, tmp_path):
    standin = make_qwen_standin(tmp_path)
    catalogs = _standin_catalogs(standin)
    assert run_hotfix("apply", "qwen-standin@5", "--root", standin.checkout, *catalogs,
                      "--patch-file", standin.v5_patch).returncode == 0
    ours = tmp_path / "advisories"
    for hotfix_id, fixed_by in (("placeholder-v3", "qwen-standin@3"), ("placeholder-v6", "qwen-standin@6")):
        data = advisory_data(id=hotfix_id, fixed_by=fixed_by, targets=[{"distribution": "vllm-ascend", "git": {"tag": "v0.26.0rc1"}}],
                             signatures=[{"pattern": r"PLE\w* placeholder", "role": "error-line", "tier": "specific", "explain": "p"},
                                         {"pattern": "async_scheduling=True", "role": "config", "weight": 0.5, "explain": "a"}])
        write_manifest(ours, data)
    done = doctor(run_hotfix, LOGS / "004-qwen-ple-placeholder.log", "--root", standin.checkout, *catalogs, "--catalog", ours, "--json")
    assert done.returncode == 1, done.stderr
    states = {v["id"]: (v["state"], v["next"]) for v in json.loads(done.stdout)["verdicts"] if v["named"]}
    given = " ".join(f"--catalog {d}" for d in [*catalogs[1::2], ours])  # every next step names the catalogs it was given
    assert states["placeholder-v3"] == ("applied", f"hotfix verify qwen-standin --root {standin.checkout} {given}")
    assert states["placeholder-v6"] == ("not-applied",
                                        f"hotfix apply qwen-standin --root {standin.checkout} {given} --patch-file PATH")
    assert states["qwen38-ple-placeholder"][0] == "unknown"  # the built-in one: qwen38-flash-next needs its patch file


def test_unreadable_log_is_one_line_exit_2_and_a_truncated_gz_exit_8(run_hotfix, tmp_path):
    done = doctor(run_hotfix, tmp_path / "missing.log")
    assert done.returncode == 2 and done.stderr.count("\n") <= 2 and "missing.log: cannot read" in done.stderr
    broken = tmp_path / "cut.log.gz"
    broken.write_bytes(gzip.compress(MAMBA_LOGS[0].read_bytes())[:200])
    before = broken.read_bytes()
    done = doctor(run_hotfix, broken)  # issue 45: malformed input, as docs/exit-codes.md lists it
    assert done.returncode == 8 and "cut.log.gz: not a whole gzip stream" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and broken.read_bytes() == before
    corrupt = tmp_path / "corrupt.log.gz"
    corrupt.write_bytes(gzip.compress(b"x" * 1000)[:12] + b"\xff" * 50)
    done = doctor(run_hotfix, corrupt)
    assert done.returncode == 8 and "not a whole gzip stream" in done.stderr, done.stderr


def test_an_advisory_cannot_be_applied_and_show_gives_its_workaround(run_hotfix):
    done = run_hotfix("apply", "flashinfer-mnnvl-allreduce", "--python", "/nonexistent/python")
    assert done.returncode == 3 and "flashinfer-mnnvl-allreduce@1 is an advisory: there is no patch to apply" in done.stderr
    shown = run_hotfix("show", "flashinfer-mnnvl-allreduce").stdout
    assert "Kind: advisory" in shown and "Workaround:" in shown and "Patches, in order:" not in shown


def test_help_documents_the_exit_codes(run_hotfix):
    out = run_hotfix("doctor", "--help").stdout
    assert "Exit codes of doctor:" in out and "9  no known issue matches" in out


@pytest.mark.parametrize("grep", ["grep", ""], ids=["grep -F prefilter", "python prefilter"])
def test_both_prefilters_give_the_result_of_plain_blocks(tmp_path, grep):
    from vllm_hotfix.catalog.index import Catalog
    from vllm_hotfix.commands.doctor_logs import blocks, parts as _parts
    from vllm_hotfix.doctor import scan
    from vllm_hotfix.doctor.engine import needles_for

    log = tmp_path / "big.log"  # more candidate lines than one grep batch, more bytes than one block
    noise = b"(Worker_TP1 pid=277) ERROR 11-30 22:41:12 [w.py:1] retrying: Error 17\n"
    filler = b"(APIServer pid=1) INFO 11-30 22:41:12 [loggers.py:123] Engine 000: Avg generation throughput: 61.2 tokens/s\n"
    log.write_bytes(b"".join(p.read_bytes() for p in (*MAMBA_LOGS, LOGS / "000-plog-5493.log"))
                    + (noise + filler * 20) * 12_000 + b"".join(p.read_bytes() for p in (LOGS / "000-server.log", *MAMBA_LOGS)))
    manifests = [m for m in Catalog.load(env={}).latest() if m.signatures]
    with open(log, "rb") as stream:
        parts = list(_parts(stream, needles_for(manifests), grep=grep))
    with open(log, "rb") as stream:
        plain = list(blocks(stream, size=1 << 16))
    found = scan([("big.log", parts)], manifests)
    assert found == scan([("big.log", plain)], manifests)
    assert found.lines == 252_000 + 96 + 24 and found.matches[0].manifest.id == "mamba-align-block-size"


@pytest.mark.real
def test_real_vllm_0_30_0_needs_mamba_until_applied_and_0_32_0_has_it_upstream(run_hotfix, vllm_install, vllm_template):
    venv = vllm_install("0.30.0")
    done = doctor(run_hotfix, *MAMBA_LOGS, "--python", venv.python)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (f"mamba-align-block-size: needed, not applied → hotfix apply mamba-align-block-size --python {venv.python}"
            " (or upgrade vllm to 0.32.0, fixed upstream)") in done.stdout
    assert run_hotfix("apply", "mamba-align-block-size", "--python", venv.python).returncode == 0
    done = doctor(run_hotfix, *MAMBA_LOGS, "--python", venv.python, "--json")
    assert done.returncode == 0, done.stderr
    (verdict,) = [v for v in json.loads(done.stdout)["verdicts"] if v["named"]]
    assert (verdict["state"], verdict["next"]) == ("applied", f"hotfix verify mamba-align-block-size --python {venv.python}")
    assert verdict["upgrade"] is None  # in effect: no alternative to offer

    fixed = vllm_template("0.32.0")  # read only: doctor writes nothing
    done = doctor(run_hotfix, *MAMBA_LOGS, "--python", fixed.python)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "mamba-align-block-size: fixed upstream" in done.stdout and "vllm 0.32.0 already contains the upstream fix" in done.stdout


def test_fingerprints_that_agree_on_every_node_exit_0_and_say_so(run_hotfix, tmp_path):
    line = "INFO 12-01 00:00:01 [guard.py:1] vllm-hotfix guard pid={} role={} fingerprint=hf1-0123456789abcdef: ok\n"
    for node in ("node0", "node1"):
        (tmp_path / f"{node}.log").write_text(line.format(100, "EngineCore_DP0") + line.format(101, "VllmWorker-0"))
    done = doctor(run_hotfix, tmp_path / "node0.log", tmp_path / "node1.log")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hotfix fingerprints agree on 2 nodes: hf1-0123456789abcdef (4 processes)" in done.stdout
    assert "paste the first error" not in done.stderr and "no error line was found" in done.stderr
    report = json.loads(doctor(run_hotfix, tmp_path / "node0.log", tmp_path / "node1.log", "--json").stdout)
    assert report["fingerprints"]["agree"] == {"fingerprint": "hf1-0123456789abcdef", "logs": 2}


def test_no_log_and_stdin_a_terminal_is_a_usage_error_not_a_silent_wait(tmp_path):
    import os
    import pty
    import subprocess
    import sys

    primary, secondary = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "vllm_hotfix", "doctor"], stdin=secondary, capture_output=True,
                              text=True, timeout=120, env={**os.environ, "HOTFIX_STATE_DIR": str(tmp_path)})
    finally:
        os.close(primary)
        os.close(secondary)
    assert done.returncode == 2 and "no log to read: stdin is a terminal" in done.stderr
    assert "docker logs vllm 2>&1 | hotfix doctor -" in done.stderr


def test_the_log_and_the_target_disagree_and_the_log_decides(run_hotfix, tmp_path):
    """vllm#27571's dumped step names 0.11.1rc4: on a 0.30 target mamba is still ruled out by the log's release."""
    checkout = make_vllm_ascend_checkout(tmp_path / "vllm-ascend")
    log = tmp_path / "crash.log"
    log.write_text((LOGS / "001-mamba-align.log").read_text().replace("0.30.0", "0.11.1rc4") + (LOGS / "001-cuda-gdb.txt").read_text())
    done = doctor(run_hotfix, log, "--json")
    (verdict,) = [v for v in json.loads(done.stdout)["verdicts"] if v["id"] == "mamba-align-block-size"]
    assert verdict["level"] == "ruled-out" and verdict["state"] == "not-applicable" and done.returncode == 9
    assert checkout.exists()


@pytest.mark.real
def test_real_target_and_log_disagree_the_report_says_so_and_the_log_decides(run_hotfix, vllm_install, tmp_path):
    venv = vllm_install("0.30.0")
    log = tmp_path / "crash.log"
    log.write_text(MAMBA_LOGS[0].read_text().replace("0.30.0", "0.11.1rc4") + MAMBA_LOGS[2].read_text())
    done = doctor(run_hotfix, log, "--python", venv.python)
    assert done.returncode == 9, done.stdout + done.stderr
    assert "note: the log says vllm 0.11.1rc4" in done.stdout and "has vllm 0.30.0" in done.stdout
    assert "ruled out: mamba-align-block-size (the log's vllm 0.11.1rc4 is outside" in done.stdout


def test_possible_then_carries_the_root_and_catalogs_given_and_an_advisory_says_show(run_hotfix, tmp_path):
    """glm-conv-null-slot from seed 000's lines (FULL_DECODE_ONLY, the MTE error): the dry run on the
    --root doctor was given; the FlashInfer advisory without its specific lines: its workaround."""
    checkout = tmp_path / "vllm ascend"
    checkout.mkdir()
    report = json.loads(doctor(run_hotfix, LOGS / "000-server.log", LOGS / "000-plog-5493.log", "--root", checkout,
                               "--json").stdout)
    (glm,) = [v for v in report["verdicts"] if v["id"] == "glm-conv-null-slot"]
    assert glm["level"] == "possible" and glm["confirm"][0]["step"].startswith("set ASCEND_GLOBAL_LOG_LEVEL=0")
    assert glm["then"] == f"hotfix apply glm-conv-null-slot --dry-run --root '{checkout}'"
    log = tmp_path / "mnnvl.log"
    log.write_text("".join(l for l in (LOGS / "003-flashinfer-mnnvl.log").read_text().splitlines(keepends=True)
                           if "mnnvl.py" not in l and "cuMemFree" not in l))
    report = json.loads(doctor(run_hotfix, log, "--json").stdout)
    (advisory,) = [v for v in report["verdicts"] if v["id"] == "flashinfer-mnnvl-allreduce"]
    assert (advisory["level"], advisory["then"]) == ("possible", "hotfix show flashinfer-mnnvl-allreduce")
    assert report["exit_code"] == 9


def test_a_generic_error_alone_is_no_candidate_and_json_says_what_tells_them_apart(run_hotfix):
    report = json.loads(doctor(run_hotfix, LOGS / "001-no-align.log", "--json").stdout)
    assert not [v for v in report["verdicts"] if v["level"] in ("confident", "possible")]
    (shared,) = report["shared"]
    assert shared["id"] == "mamba-align-block-size" and shared["level"] == "shared"
    assert shared["tell_apart"][0].startswith("needs: align mode is on")
    assert any(t.startswith("named by: the faulting kernel") for t in shared["tell_apart"])
    roots = report["root_errors"]
    assert roots[0]["text"].endswith("torch.AcceleratorError: CUDA error: an illegal memory access was encountered")
    assert roots[0]["wrappers"][0]["text"].endswith("WorkerProc hit an exception.")
