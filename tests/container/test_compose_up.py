"""What `hotfix export` + `hotfix compose` generate, run by a real compose implementation (docker-compose 1.29
against podman's Docker API) in a real container engine, from a stock image that has never seen vllm-hotfix
(tests/fixtures/podman.py). vLLM's own plugin loader runs the mounted guard in each process of the
`vllm serve` process tree (tests/container/serve.py: the server, an engine core and two workers spawned as
vLLM spawns them); the compose healthcheck, exactly as generated, is unhealthy until every process checked
and healthy after; the guard's `verify` in the container agrees with the host's `hotfix verify --lock`.
Recreated from a compose file that lost the fix's mount, strict mode (the HOTFIX_STRICT=1 `hotfix compose` wrote:
strict by default) refuses to serve and the healthcheck never passes; `hotfix compose --remove` gives back the
file byte for byte."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

import realdata
from fixtures import kube, podman

pytestmark = [pytest.mark.container, pytest.mark.tools, pytest.mark.real, pytest.mark.slow, pytest.mark.vllm_full]

HOTFIX = "mamba-align-block-size"
MAMBA = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
SERVE = Path(__file__).with_name("serve.py")
PROBE = ["CMD", "python3", "-I", "-m", "vllm_hotfix_guard", "ready"]
GUARD_LINE = re.compile(r"vllm-hotfix guard pid=(\d+) role=(\S+(?: \([^)]*\))?) .*?fingerprint=(hf1-[0-9a-f]+)")


def base_compose(image: str, full: realdata.Venv) -> str:
    """The user's compose file, as it was before vllm-hotfix: the stock image, `vllm serve` with TP 2, torch & co.
    mounted read-only (the image carries vLLM, not its dependencies); strict mode is what `hotfix compose` writes."""
    return f"""\
# vLLM 0.30.0, tensor parallel 2
services:
  vllm:
    image: {image}
    command: ["python3", "/srv/serve.py", "serve", "/models/tiny", "--tensor-parallel-size", "2"]
    environment:
      NCCL_DEBUG: WARN
    volumes:
      - {full.root}:{podman.DEPS}:ro
      - {SERVE}:/srv/serve.py:ro
"""


def k8s_probe(tmp_path: Path, run_hotfix, export: Path, image: str, path: str) -> list[str]:
    """The readinessProbe `hotfix k8s` renders for this image's container when its base probe is an httpGet of
    ``path`` on port 8000 (the server's own: tests/commands/test_k8s_probes.py), as `kubectl kustomize` renders it."""
    base, out = tmp_path / f"k8s{path.replace('/', '-')}.yaml", tmp_path / f"overlay{path.replace('/', '-')}"
    base.write_text(f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: vllm}}
spec:
  selector: {{matchLabels: {{app: vllm}}}}
  template:
    metadata: {{labels: {{app: vllm}}}}
    spec:
      containers:
      - name: vllm
        image: {image}
        readinessProbe: {{httpGet: {{path: {path}, port: 8000}}, timeoutSeconds: 5}}
""")
    done = run_hotfix("k8s", "--export-dir", export, "--base", base, "--to", out, "--workload", "deployment/vllm",
                      "--container", "vllm", "--container-site-packages", podman.SITE, env=podman.env())
    assert done.returncode == 0, done.stderr
    assert "readinessProbe of vllm: kept its own check, combined with the guard's" in done.stdout, done.stdout
    deployment = next(o for o in kube.render(out) if o["kind"] == "Deployment")
    return deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["exec"]["command"]


def compose_probe(tmp_path: Path, run_hotfix, export: Path, image: str, path: str) -> list[str]:
    """The healthcheck test `hotfix compose` writes for a service whose own healthcheck asks ``path`` on port 8000
    (a CMD-SHELL, as users write them): the guard's probe and that check in one test (readiness.combined_test),
    as the engine reads the file (YAML); its argv after CMD."""
    from ruamel.yaml import YAML

    app = tmp_path / f"compose{path.replace('/', '-')}"
    app.mkdir()
    check = f"python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:8000{path}\", timeout=5)'"
    (app / "compose.yaml").write_text(f"""\
services:
  vllm:
    image: {image}
    environment:
      HOTFIX_STRICT: "1"
    healthcheck:
      test: ["CMD-SHELL", {json.dumps(check)}]
      timeout: 10s
""")
    done = run_hotfix("compose", HOTFIX, "--service", "vllm", "--export-dir", export, "--container-site-packages",
                      podman.SITE, cwd=app, env=podman.env())
    assert done.returncode == 0, done.stderr
    assert "healthcheck: its own test kept, combined with" in done.stdout, done.stdout
    test = YAML(typ="safe").load((app / "compose.yaml").read_text())["services"]["vllm"]["healthcheck"]["test"]
    assert test[0] == "CMD" and json.loads(test[6])["exec"]["command"] == ["/bin/sh", "-c", check], test
    return test[1:]


def guard_lines(container: str) -> list[tuple[str, str, str, str]]:
    """(pid, role, fingerprint, the line) of every guard line the container logged."""
    logs = podman.podman("logs", container, check=False)
    return [(*m.groups(), line) for line in (logs.stdout + logs.stderr).splitlines() if (m := GUARD_LINE.search(line))]


def running(container: str) -> bool:
    return podman.podman("inspect", container, "--format", "{{.State.Running}}").stdout.strip() == "true"


def health(container: str) -> tuple[int, str]:
    """Run the container's own healthcheck once (podman runs it on a systemd timer; there is no systemd
    here, so the test triggers it) and read the status podman keeps."""
    done = podman.podman("healthcheck", "run", container, check=False)
    state = json.loads(podman.podman("inspect", container, "--format", "{{json .State}}").stdout)
    return done.returncode, (state.get("Health") or state.get("Healthcheck") or {}).get("Status", "")


def test_the_generated_compose_file_runs_the_guard_in_every_vllm_process(tmp_path, run_hotfix, stock_image,
                                                                          compose_engine, vllm_install):
    podman.python_matches_image()
    full, template = realdata.vllm_full_venv("0.30.0"), realdata.vllm_template("0.30.0")
    export, app = tmp_path / "hotfix-export", tmp_path / "app"
    app.mkdir()
    done = run_hotfix("export", HOTFIX, "--to", export, "--python", template.python, env=podman.env())
    assert done.returncode == 0, done.stderr
    base = base_compose(stock_image, full).encode()
    (app / "compose.yaml").write_bytes(base)
    done = run_hotfix("compose", HOTFIX, "--service", "vllm", "--export-dir", export, "--container-site-packages",
                      podman.SITE, cwd=app, env=podman.env())
    assert done.returncode == 0, done.stderr
    generated = (app / "compose.yaml").read_bytes()
    print(generated.decode())
    assert b'      HOTFIX_LOCK: /etc/vllm-hotfix/hotfix.lock\n      HOTFIX_STRICT: "1"\n' in generated  # ours
    # one project per run: two runs of the suite on one machine (a developer's and CI's) never share a container
    project = f"hf{os.getpid()}{tmp_path.name.replace('_', '').lower()}"[:30]
    container = None
    probes = {(kind, path): make(tmp_path, run_hotfix, export, stock_image, path) for path in ("/health", "/nope")
              for kind, make in (("k8s", k8s_probe), ("compose", compose_probe))}
    try:
        container = _up_until_healthy(compose_engine, project, app, probes)
        _verify_agrees(container, export, vllm_install, run_hotfix)
        _recreated_without_the_fix_refuses(compose_engine, project, app, container, generated)
    finally:  # the container's log stays in the test's directory, which pytest keeps when the test fails
        logs = compose_engine.compose(project, "logs", "--no-color", cwd=app, check=False)
        (tmp_path / "compose.log").write_text(logs.stdout + logs.stderr)
        print(logs.stdout[-20000:])
        compose_engine.compose(project, "down", "-t", "1", cwd=app, check=False)
    assert (app / "compose.yaml").read_bytes() == generated
    done = run_hotfix("compose", HOTFIX, "--service", "vllm", "--export-dir", export, "--container-site-packages",
                      podman.SITE, "--remove", cwd=app, env=podman.env())
    assert done.returncode == 0, done.stderr
    assert (app / "compose.yaml").read_bytes() == base


def _up_until_healthy(engine, project: str, app: Path, probes: dict) -> str:
    """Up; the healthcheck, `ready`, k8s's combined readinessProbe and compose's combined healthcheck test
    (``probes``: by kind and the server's own check's path) fail while the workers have not checked, though the
    server answers /health; all pass once they have, except the combined ones whose own check gets a 404. The
    container's name."""
    engine.compose(project, "up", "-d", cwd=app)
    container = engine.container(project, "vllm")
    config = json.loads(podman.podman("inspect", container, "--format", "{{json .Config.Healthcheck}}").stdout)
    assert config["Test"] == PROBE, config  # the healthcheck compose wrote, as the engine runs it
    # the server and its engine core load vLLM (torch included) and the plugins; the workers wait for a go
    podman.wait_for("the guard in the server and the engine core", lambda: len(guard_lines(container)) >= 2
                    or not running(container))
    assert running(container), f"the container stopped: {podman.podman('logs', container, check=False).stderr[-3000:]}"
    lines = guard_lines(container)
    assert len(lines) == 2 and all(" in effect" in line and "NOT IN EFFECT" not in line for *_, line in lines), lines
    code, status = health(container)
    assert code != 0 and status != "healthy", status  # the workers have not checked yet
    ready = podman.podman("exec", container, *PROBE[1:], check=False)
    assert ready.returncode == 1 and "VllmWorker-0" in ready.stdout and "VllmWorker-1" in ready.stdout, ready.stdout
    answers = podman.podman("exec", container, "python3", "-c", "import urllib.request as u; "
                            "print(u.urlopen('http://127.0.0.1:8000/health').status)", check=False)
    assert answers.stdout.strip() == "200", answers.stdout + answers.stderr  # the server's own check passes...
    for kind in ("k8s", "compose"):  # ...Ready / healthy it is not, with the server's own check combined
        combined = podman.podman("exec", container, *probes[(kind, "/health")], check=False)
        assert combined.returncode == 1 and "VllmWorker-0" in combined.stdout, (kind, combined.stdout)

    podman.podman("exec", container, "touch", "/tmp/start-workers")
    podman.wait_for("the guard in both workers", lambda: len(guard_lines(container)) >= 4)
    lines = guard_lines(container)
    assert sorted(role for _, role, _, _ in lines) == ["EngineCore", "VllmWorker-0", "VllmWorker-1",
                                                       "main (serve.py serve)"], lines
    assert len({pid for pid, *_ in lines}) == 4 and len({fp for _, _, fp, _ in lines}) == 1, lines
    podman.wait_for("the healthcheck to pass", lambda: health(container)[0] == 0, timeout=120, every=2)
    assert health(container) == (0, "healthy")
    for kind in ("k8s", "compose"):
        combined = podman.podman("exec", container, *probes[(kind, "/health")], check=False)
        assert combined.returncode == 0, (kind, combined.stdout + combined.stderr)
    combined = podman.podman("exec", container, *probes[("k8s", "/nope")], check=False)
    assert combined.returncode == 1 and ":8000/nope: HTTP 404" in combined.stdout, combined.stdout + combined.stderr
    combined = podman.podman("exec", container, *probes[("compose", "/nope")], check=False)  # the guard passes, its own not
    assert combined.returncode == 1 and "HTTP Error 404" in combined.stderr and "VllmWorker" not in combined.stdout, \
        combined.stdout + combined.stderr
    return container


def _verify_agrees(container: str, export: Path, vllm_install, run_hotfix) -> None:
    """The guard's verify in the container, and the host's `hotfix verify --lock` on an install with the
    same files (the fix applied to a copy of the same vLLM): the same verdicts and fingerprint."""
    inside = podman.podman("exec", container, "python3", "-m", "vllm_hotfix_guard", "verify", "--json", check=False)
    assert inside.returncode == 0, inside.stdout + inside.stderr
    host_install = vllm_install("0.30.0")
    done = run_hotfix("apply", HOTFIX, "--python", host_install.python, env=podman.env())
    assert done.returncode == 0, done.stderr
    host = run_hotfix("verify", "--lock", export / "hotfix.lock", "--python", host_install.python, "--json",
                      env=podman.env())
    assert host.returncode == 0, host.stderr
    seen, expected = json.loads(inside.stdout), json.loads(host.stdout)
    assert [(v["id"], v["state"], v["fingerprint"]) for v in seen] == \
        [(v["id"], v["state"], v["fingerprint"]) for v in expected], (seen, expected)
    (_, _, fingerprint, _), *_ = guard_lines(container)
    assert {v["fingerprint"] for v in seen} == {fingerprint}


def _recreated_without_the_fix_refuses(engine, project: str, app: Path, container: str, generated: bytes) -> None:
    """A compose file that lost the patched file's mount (guard, lock and healthcheck still there)."""
    lost = b"".join(line for line in generated.splitlines(keepends=True) if MAMBA.encode() not in line)
    assert lost.count(b"\n") == generated.count(b"\n") - 1
    (app / "compose.lost.yaml").write_bytes(lost)
    engine.compose(project, "-f", "compose.lost.yaml", "up", "-d", "--force-recreate", cwd=app)
    exit_code = podman.podman("wait", container, timeout=300).stdout.strip()
    lines = guard_lines(container)
    logs = podman.podman("logs", container, check=False)
    assert exit_code != "0", (exit_code, lines)
    assert "refusing to serve (HOTFIX_STRICT=1" in logs.stdout + logs.stderr, logs.stdout + logs.stderr
    assert [role for _, role, _, _ in lines] == ["main (serve.py serve)"] and "NOT IN EFFECT" in lines[0][3], lines
    code, status = health(container)
    assert code != 0 and status != "healthy", status
