"""`hotfix k8s` keeps the server's own readinessProbe (issue 44): a base container's httpGet, tcpSocket or
exec check goes inside one exec probe after the guard's `ready`, so a pod is Ready only when every process
checked AND the server answers its own probe; the output says what was combined. The rendered YAML is
checked with `kubectl kustomize` + kubernetes-validate, and the rendered probe's program is run for real
(here against a server on 127.0.0.1 with a stand-in for `ready`; in the container tier,
tests/container/test_compose_up.py, in a container with the real guard and vLLM's processes)."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading

import pytest

from fixtures.kube import DEPLOYMENT, LWS, render, validate
from test_k8s import PROBE, by_kind, overlay
from vllm_hotfix.containers.readiness import PROGRAM

pytestmark = pytest.mark.tools  # kubectl renders every overlay

HTTP = "        readinessProbe:\n          httpGet: {path: /health, port: 8000}\n          initialDelaySeconds: 60\n"


def with_probe(probe: str, manifest: str = DEPLOYMENT) -> str:
    done = manifest.replace("        env:\n", probe + "        env:\n", 1)
    assert done != manifest
    return done


def rendered_probe(tmp_path, run_hotfix, manifest: str, *args: str) -> tuple[dict, dict]:
    done, _, _, out = overlay(tmp_path, run_hotfix, manifest, "--workload", "deployment/vllm", "--container", "vllm",
                              *args)
    assert done.returncode == 0, done.stderr
    objects = render(out)
    validate(objects)
    (container,) = by_kind(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container["readinessProbe"], json.loads(done.stdout)


def test_an_http_probe_of_the_base_is_kept_inside_one_exec_probe_after_ready(tmp_path, run_hotfix):
    probe, report = rendered_probe(tmp_path, run_hotfix, with_probe(HTTP))
    python, isolated, dash_c, program, guard, check, timeout = probe["exec"]["command"]
    assert (python, isolated, dash_c, program) == ("python3", "-I", "-c", PROGRAM)
    assert json.loads(guard) == PROBE["exec"]["command"]  # the guard's own probe, as it runs alone
    assert json.loads(check) == {"httpGet": {"path": "/health", "port": 8000}} and timeout == "1"
    # the server's rhythm (its initialDelaySeconds), ours where it has none; time for both checks
    assert {k: v for k, v in probe.items() if k != "exec"} == {
        "initialDelaySeconds": 60, "periodSeconds": 10, "failureThreshold": 3, "timeoutSeconds": 6}
    assert report["readiness"] == {"vllm": "`python3 -I -m vllm_hotfix_guard ready`, then the container's own httpGet "
                                            "http://(the pod IP):8000/health, in one exec probe (Ready only when both "
                                            "pass; timeoutSeconds 5+1)"}


def test_the_output_says_what_was_combined_and_how(tmp_path, run_hotfix):
    done, _, _, out = overlay(tmp_path, run_hotfix, with_probe(HTTP), "--workload", "deployment/vllm",
                              "--container", "vllm")
    plain = run_hotfix("k8s", "--export-dir", tmp_path / "export", "--base", tmp_path / "rendered.yaml", "--to",
                       tmp_path / "again", "--workload", "deployment/vllm", "--container", "vllm")
    assert plain.returncode == 0, plain.stderr
    lines = plain.stdout.splitlines()
    assert "readinessProbe of vllm: kept its own check, combined with the guard's: `python3 -I -m vllm_hotfix_guard " \
           "ready`, then the container's own httpGet http://(the pod IP):8000/health, in one exec probe (Ready only " \
           "when both pass; timeoutSeconds 5+1)" in lines, lines
    assert any(line.startswith("checked: ") and "the readinessProbe `python3 -I -m vllm_hotfix_guard ready`, then the "
               "container's own httpGet" in line for line in lines), lines


@pytest.mark.parametrize("probe, check", [
    ("        ports: [{name: http, containerPort: 8000}]\n        readinessProbe:\n"
     "          httpGet: {path: /v1/models, port: http, scheme: HTTPS, httpHeaders: [{name: X-A, value: b}]}\n",
     {"httpGet": {"path": "/v1/models", "port": 8000, "scheme": "HTTPS", "httpHeaders": [{"name": "X-A", "value": "b"}]}}),
    ("        readinessProbe:\n          tcpSocket: {port: 8000}\n          timeoutSeconds: 3\n",
     {"tcpSocket": {"port": 8000}}),
    ("        readinessProbe:\n          exec: {command: [cat, /tmp/up]}\n", {"exec": {"command": ["cat", "/tmp/up"]}}),
], ids=["named-port-https-headers", "tcp", "exec"])
def test_every_handler_the_guard_can_run_is_kept(tmp_path, run_hotfix, probe, check):
    found, _ = rendered_probe(tmp_path, run_hotfix, with_probe(probe))
    assert json.loads(found["exec"]["command"][5]) == check


@pytest.mark.parametrize("probe, why", [
    ("        readinessProbe:\n          grpc: {port: 9000}\n", "has a grpc check"),
    ("        readinessProbe:\n          httpGet: {path: /health, port: metrics}\n", "names the port 'metrics'"),
])
def test_a_probe_that_cannot_be_combined_is_refused_never_replaced(tmp_path, run_hotfix, probe, why):
    done, _, _, out = overlay(tmp_path, run_hotfix, with_probe(probe), "--workload", "deployment/vllm",
                              "--container", "vllm")
    assert done.returncode == 3 and why in done.stderr and "nothing was written" in done.stderr, done.stderr
    assert not out.exists()
    done, _, _, out = overlay(tmp_path, run_hotfix, with_probe(probe), "--workload", "deployment/vllm",
                              "--container", "vllm", "--no-readiness")
    assert done.returncode == 0, done.stderr  # without readiness, the base's probe is left as it is
    assert "grpc" in probe or "metrics" in json.dumps(by_kind(render(out), "Deployment"))


def test_the_leaders_probe_is_kept_in_a_leaderworkerset(tmp_path, run_hotfix):
    probed = LWS.replace("        - name: vllm-leader\n", "        - name: vllm-leader\n"
                         "          readinessProbe: {tcpSocket: {port: 8000}}\n", 1)
    assert probed != LWS
    done, _, _, out = overlay(tmp_path, run_hotfix, probed, "--workload", "leaderworkerset/vllm",
                              "--container", "vllm-leader", "--container", "vllm-worker")
    assert done.returncode == 0, done.stderr
    objects = render(out)
    validate(objects)
    leader = by_kind(objects, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    assert json.loads(leader["containers"][0]["readinessProbe"]["exec"]["command"][5]) == {"tcpSocket": {"port": 8000}}


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def run_probe(command: list[str], guard_exit: int) -> subprocess.CompletedProcess:
    """The rendered probe's own argv, with `python3` this interpreter and the guard's `ready` a stand-in that
    exits ``guard_exit`` (the real one runs in the container tier)."""
    argv = [sys.executable, *command[1:4], json.dumps([sys.executable, "-c", f"import sys; sys.exit({guard_exit})"]),
            *command[5:]]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_the_rendered_probe_passes_only_when_ready_and_the_server_answers(tmp_path, run_hotfix):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        def probe(path: str, *, dead_port: bool = False) -> list[str]:
            spec = f"          httpGet: {{host: 127.0.0.1, path: {path}, port: {free_port() if dead_port else port}}}\n"
            found, _ = rendered_probe(tmp_path / path.strip("/") / str(dead_port), run_hotfix,
                                      with_probe("        readinessProbe:\n" + spec))
            return found["exec"]["command"]

        healthy = probe("/health")
        assert run_probe(healthy, 0).returncode == 0
        assert run_probe(healthy, 1).returncode == 1  # the server answers, a process has not checked: not Ready
        sick = run_probe(probe("/sick"), 0)
        assert sick.returncode == 1 and "httpGet 127.0.0.1:" in sick.stdout and "HTTP 503" in sick.stdout, sick.stdout
        down = run_probe(probe("/health", dead_port=True), 0)
        assert down.returncode == 1 and "ConnectionRefusedError" in down.stdout, down.stdout
    finally:
        server.shutdown()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
