"""Issue 31, doctor in bounded memory: a line is never held whole (its head is matched, the rest counted),
a device named as a log is refused at once, and a stream past STREAM_LIMIT stops with a clear error. Peak
memory is measured on a real subprocess (ru_maxrss of its only child), not timed."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

LONG = 256 << 20  # one line of 256 MiB: held whole it costs the process 256 MiB at least (512 MiB decoded)
MEASURE = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
sys.stdout.write(done.stdout.decode())
sys.stderr.write(done.stderr.decode())
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, file=sys.stderr)
sys.exit(done.returncode)
"""


def doctor_peak(*args, env=None) -> tuple[subprocess.CompletedProcess, int]:
    """(the run, its peak RSS in MiB)."""
    full = {**os.environ, **(env or {})}
    done = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "vllm_hotfix", "doctor", *map(str, args)],
                          capture_output=True, text=True, env=full, timeout=600)
    return done, int(done.stderr.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def one_long_line_gz(tmp_path_factory) -> Path:
    """A .gz of a vLLM error line that runs on for 256 MiB (written in pieces: never in memory here either)."""
    path = tmp_path_factory.mktemp("long") / "one-line.log.gz"
    head = b"ERROR 11-30 22:49:06 [core.py:1] RuntimeError: CUDA error: an illegal memory access was encountered "
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(head)
        piece = b"x" * (8 << 20)
        for _ in range(LONG // len(piece)):
            out.write(piece)
        out.write(b"\nINFO 11-30 22:49:07 [core.py:2] after\n")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("prefilter", ["aho-corasick", "grep", "python"])
def test_a_line_of_256_mib_is_counted_not_held(one_long_line_gz, prefilter):
    done, peak = doctor_peak(one_long_line_gz, "--json", env={"HOTFIX_DOCTOR_PREFILTER": prefilter})
    assert done.returncode in (0, 1, 9), done.stderr
    report = json.loads(done.stdout)
    assert report["lines"] == 2 and report["long_lines"] == 1
    (first,) = report["first_errors"]
    assert first["line"] == 1 and "illegal memory access" in first["text"]
    assert peak < 160, f"doctor peaked at {peak} MiB on one {LONG >> 20} MiB line"


def test_a_device_named_as_a_log_is_refused_at_once(run_hotfix):
    for device in ("/dev/zero", "/dev/urandom"):
        done = run_hotfix("doctor", device)
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines()[0] == f"hotfix: error: {device}: is a device or socket, not a log file"


def test_a_fifo_is_read_as_a_stream(tmp_path, run_hotfix):
    fifo = tmp_path / "log"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"printf 'INFO 11-30 22:49:06 [x.py:1] hello\\n' > '{fifo}'"])
    done = run_hotfix("doctor", fifo, "--json")
    writer.wait()
    assert done.returncode == 9 and json.loads(done.stdout)["lines"] == 1, done.stderr


@pytest.mark.parametrize("gz", [False, True])
def test_a_stream_past_the_cap_stops_with_a_clear_error(monkeypatch, capsys, gz):
    """`cat /dev/zero | hotfix doctor -` (or a .gz bomb) stops at STREAM_LIMIT (here made 64 MiB)."""
    from vllm_hotfix.cli import main
    from vllm_hotfix.commands import doctor_logs

    monkeypatch.setattr(doctor_logs, "STREAM_LIMIT", 64 << 20)

    class Zeros(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, view):
            view[:] = b"\0" * len(view)
            return len(view)

    source = io.BufferedReader(Zeros())
    if gz:
        data = io.BytesIO()
        with gzip.GzipFile(fileobj=data, mode="wb", compresslevel=1) as out:
            for _ in range(80):
                out.write(b"\0" * (1 << 20))
        source = io.BufferedReader(io.BytesIO(data.getvalue()))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(source))
    with pytest.raises(SystemExit) as stopped:
        main(["doctor", "-"])
    assert stopped.value.code == 8
    assert capsys.readouterr().err.splitlines()[0] == (
        "hotfix: error: <stdin>: more than 64.0 MiB read from a stream (a pipe, stdin, a FIFO or a .gz's content); "
        "doctor stops there")
