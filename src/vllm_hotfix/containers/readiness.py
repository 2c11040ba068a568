"""What `k8s` and `compose` add for readiness (docs/readiness.md): a memory-backed directory for the guard's
records (an ``emptyDir`` of medium Memory / a tmpfs) at READY_IN_CONTAINER, HOTFIX_READY_DIR naming it, and
``python -m vllm_hotfix_guard ready`` as the readinessProbe / healthcheck. A readinessProbe the container
has already is never dropped: ``combined`` makes one exec probe of the guard's and the server's own check.
Pure values, no I/O."""

from __future__ import annotations

import json
from typing import Optional

from vllm_hotfix_guard.errors import Refused
from vllm_hotfix_guard.settings import EXPECT_FINGERPRINT_ENV, FINGERPRINT_ANNOTATION, READY_DIR_ENV

READY_IN_CONTAINER = "/run/vllm-hotfix/ready"  # where the records go in the container
VOLUME = "vllm-hotfix-ready"                    # the emptyDir's name in the pod
SIZE = "16Mi"                                   # records are ~300 bytes each
IMAGE_PYTHON = "python3"                        # the image's interpreter that runs vLLM (and has the guard)
GUARD_MODULE = "vllm_hotfix_guard"              # the guard's own distribution (python -m ... ready)
PERIOD, TIMEOUT, FAILURES = 10, 5, 3            # seconds, seconds, probes: an interpreter start each time


def probe_command(python: str = IMAGE_PYTHON) -> list[str]:
    return [python, "-I", "-m", GUARD_MODULE, "ready"]  # -I: not the working directory's vllm_hotfix_guard, no PYTHON* variables


def k8s_parts(mounts: list, volumes: list, env: list, python: str) -> dict:
    """The readiness directory (an emptyDir of medium Memory, HOTFIX_READY_DIR) added to the lists; the probe."""
    mounts.append({"name": VOLUME, "mountPath": READY_IN_CONTAINER})
    volumes.append({"name": VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": SIZE}})
    env.append({"name": READY_DIR_ENV, "value": READY_IN_CONTAINER})
    return {"exec": {"command": probe_command(python)}, "periodSeconds": PERIOD,
            "timeoutSeconds": TIMEOUT, "failureThreshold": FAILURES}


def expect_fingerprint_env() -> dict:
    """HOTFIX_EXPECT_FINGERPRINT from the pod's own fingerprint annotation (the downward API): `ready` is not
    ready while the mounted lock's fingerprint is another (the pod's own proof, docs/readiness.md)."""
    return {"name": EXPECT_FINGERPRINT_ENV,
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{FINGERPRINT_ANNOTATION}']"}}}


def probed(probe: Optional[dict]) -> dict:
    """The container's readinessProbe in a strategic-merge patch: replacing the base's (merged, an httpGet and
    our exec would make one probe with two handlers, which the API server refuses); a base probe is inside
    ``probe`` already (``combined``), never dropped."""
    return {"readinessProbe": {"$patch": "replace", **probe}} if probe is not None else {}


def lws_probe(found: dict, containers: tuple[str, ...], probe: Optional[dict]) -> tuple[list[dict], dict]:
    """The readinessProbe of the leader's named containers (its `vllm serve` command line is what `ready`
    reads; a worker pod's processes, Ray's or headless, are told by hand: docs/readiness.md), each combined
    with the container's own; and the probes by container name (``container_probes``)."""
    lwt = (found.get("spec") or {}).get("leaderWorkerTemplate") or {}
    template = "leaderTemplate" if "leaderTemplate" in lwt else None
    if probe is None or template is None:
        return [], {}
    pod = (lwt[template] or {}).get("spec") or {}
    names = [c.get("name") for c in pod.get("containers") or ()]
    probes = container_probes(pod, tuple(n for n in names if n in containers), probe)
    return [{"op": "add", "path": f"/spec/leaderWorkerTemplate/{template}/spec/containers/{i}/readinessProbe",
             "value": probes[n][0]} for i, n in enumerate(names) if n in probes], probes


def container_probes(pod: dict, names: tuple[str, ...], probe: Optional[dict]) -> dict[str, tuple[dict, str]]:
    """Per named container of the pod spec: its readinessProbe (ours, or ours combined with the one it has:
    ``combined``) and what it does, in words."""
    if probe is None:
        return {}
    found = {c.get("name"): c for c in pod.get("containers") or () if isinstance(c, dict)}
    return {name: combined(probe, found.get(name) or {}, name) for name in names}


# The combined readinessProbe's program, run in the container as `python3 -I -c PROGRAM GUARD CHECK TIMEOUT`:
# the guard's own probe (GUARD: its argv, JSON), then the base probe's check (CHECK: its handler, JSON, a named
# port resolved) as the kubelet runs it (httpGet: a status from 200 to 399, the pod's IP unless `host` is set,
# HTTPS unverified; tcpSocket: a connection; exec: exit 0), at most TIMEOUT seconds. Exit 0 only when both pass.
# Standard library only (any Python 3 an image has); -I: nothing from the working directory or PYTHON* runs.
PROGRAM = """\
import json, socket, subprocess, sys
guard, check, timeout = json.loads(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3])
code = subprocess.run(guard).returncode
if code:
    sys.exit(code)
kind, spec = next(iter(check.items()))
host = spec.get("host") or ""
if kind != "exec" and not host:
    try:
        host = socket.gethostbyname(socket.gethostname())
    except OSError:
        host = "127.0.0.1"
try:
    if kind == "exec":
        code = subprocess.run(spec["command"], timeout=timeout).returncode
    elif kind == "tcpSocket":
        socket.create_connection((host, int(spec["port"])), timeout).close()
    else:
        import http.client, ssl
        https = str(spec.get("scheme") or "HTTP").upper() == "HTTPS"
        conn = (http.client.HTTPSConnection(host, int(spec["port"]), timeout=timeout,
                                            context=ssl._create_unverified_context()) if https
                else http.client.HTTPConnection(host, int(spec["port"]), timeout=timeout))
        headers = {"User-Agent": "kube-probe (vllm-hotfix)", "Accept": "*/*"}
        headers.update((h["name"], h["value"]) for h in spec.get("httpHeaders") or ())
        conn.request("GET", spec.get("path") or "/", headers=headers)
        status = conn.getresponse().status
        code = 0 if 200 <= status < 400 else 1
        if code:
            print("the container's own check: httpGet %s:%s%s: HTTP %d"
                  % (host, spec["port"], spec.get("path") or "/", status))
except Exception as exc:
    print("the container's own check (%s): %s: %s" % (kind, type(exc).__name__, exc))
    code = 1
sys.exit(1 if code else 0)
"""
HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
TIMING = ("initialDelaySeconds", "periodSeconds", "successThreshold", "failureThreshold")  # the base's own rhythm


def combined(probe: dict, container: dict, name: str) -> tuple[dict, str]:
    """The readinessProbe for a container: the guard's ``probe`` alone when the container has none; else one
    exec probe running PROGRAM (Ready only when every process checked AND the server answers its own probe),
    with the base's rhythm and a timeout of ours plus its own. And what it does, in words."""
    own = probe["exec"]["command"]
    base = container.get("readinessProbe")
    if base is None:
        return probe, f"`{' '.join(own)}`"
    where = f"container {name}: readinessProbe"
    kinds = [k for k in HANDLERS if isinstance(base, dict) and k in base]
    if len(kinds) != 1 or kinds[0] == "grpc":
        what = "has a grpc check" if kinds == ["grpc"] else "is not one exec, httpGet or tcpSocket check"
        raise Refused(f"{where} {what}, which the guard's exec probe cannot run: not replaced; nothing was written",
                      hint="pass --no-readiness and keep it (docs/readiness.md says what to add by hand)")
    kind = kinds[0]
    check = {kind: _check(kind, base[kind], container, f"{where}.{kind}")}
    timeout = base.get("timeoutSeconds", 1)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= 3600:
        raise Refused(f"{where}.timeoutSeconds is {timeout!r}, not a number of seconds; nothing was written")
    command = [own[0], "-I", "-c", PROGRAM, json.dumps(own), json.dumps(check, sort_keys=True), str(timeout)]
    probe = {"exec": {"command": command}, "periodSeconds": PERIOD, "failureThreshold": FAILURES,
             **{k: base[k] for k in TIMING if k in base}, "timeoutSeconds": TIMEOUT + timeout}
    return probe, (f"`{' '.join(own)}`, then the container's own {_describe(kind, check[kind])}, in one exec probe "
                   f"(Ready only when both pass; timeoutSeconds {TIMEOUT}+{timeout})")


def combined_test(test: object, timeout: int, where: str, python: str = IMAGE_PYTHON, *, keep: str = "") -> list[str]:
    """A compose healthcheck ``test`` that runs the guard's probe, then the service's own ``test`` as the engine
    runs it (``[CMD, ARG...]``: that argv; ``[CMD-SHELL, CMD]`` or a string: ``/bin/sh -c CMD``), at most
    ``timeout`` seconds: healthy only when both pass. The same PROGRAM as k8s's combined probe (an exec check);
    ``keep``: the service's own ``test`` as its file wrote it, carried in the check so that `--remove` puts it back."""
    if isinstance(test, str):
        argv = ["/bin/sh", "-c", test]
    elif (isinstance(test, list) and len(test) >= 2 and all(isinstance(a, str) for a in test)
          and test[0] in ("CMD", "CMD-SHELL")):
        argv = test[1:] if test[0] == "CMD" else ["/bin/sh", "-c", test[1]]
        if test[0] == "CMD-SHELL" and len(test) != 2:
            raise Refused(f"{where}: CMD-SHELL takes one command string; not combined")
    else:
        what = "is NONE (the image's check is turned off)" if test in (["NONE"], "NONE") else \
            "is not a string, [CMD, ARG...] or [CMD-SHELL, COMMAND]"
        raise Refused(f"{where} {what}: not combined")
    own = probe_command(python)
    check = {"exec": {"command": argv}, **({"compose_test": keep} if keep else {})}
    # "exec" first: PROGRAM runs the check's first entry
    return ["CMD", own[0], "-I", "-c", PROGRAM, json.dumps(own), json.dumps(check), str(timeout)]


def kept_test(test: object) -> Optional[str]:
    """The service's own ``test`` text that ``combined_test`` carries (None: not a combined test)."""
    if not isinstance(test, list) or len(test) != 8 or test[0] != "CMD" or test[4] != PROGRAM:
        return None
    try:
        check = json.loads(test[6])
    except (TypeError, ValueError, RecursionError):
        return None
    kept = check.get("compose_test") if isinstance(check, dict) else None
    return kept if isinstance(kept, str) and kept else None


def duration_seconds(text: object) -> Optional[int]:
    """A compose duration (``30s``, ``1m30s``, ``1.5s``, ``500ms``; a bare number is seconds) in whole seconds,
    rounded up (at least 1); None when it is not one."""
    import math
    import re

    value = str(text).strip() if isinstance(text, (str, int)) and not isinstance(text, bool) else ""
    if re.fullmatch(r"\d+", value):
        return max(1, int(value))
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)", value)
    if not parts or "".join(n + u for n, u in parts) != value:
        return None
    scale = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    return max(1, math.ceil(sum(float(n) * scale[u] for n, u in parts)))


def is_combined(probe: dict) -> bool:
    """A probe ``combined`` made (the guard's and the container's own check), not the guard's alone."""
    return PROGRAM in ((probe.get("exec") or {}).get("command") or ())


def _check(kind: str, spec: object, container: dict, where: str) -> dict:
    """The base probe's handler, checked, with a named port resolved to the container's port number."""
    if not isinstance(spec, dict):
        raise Refused(f"{where} is not a mapping; nothing was written")
    if kind == "exec":
        command = spec.get("command")
        if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
            raise Refused(f"{where}.command is not a list of strings; nothing was written")
        return {"command": command}
    out = {k: spec[k] for k in ("host", "path", "scheme") if k in spec}
    if not all(isinstance(v, str) for v in out.values()) or out.get("scheme", "HTTP").upper() not in ("HTTP", "HTTPS"):
        raise Refused(f"{where}: host, path and scheme (HTTP or HTTPS) must be strings; nothing was written")
    headers = spec.get("httpHeaders")
    if headers is not None:
        if not isinstance(headers, list) or not all(isinstance(h, dict) and isinstance(h.get("name"), str)
                                                    and isinstance(h.get("value"), str) for h in headers):
            raise Refused(f"{where}.httpHeaders is not a list of name/value strings; nothing was written")
        out["httpHeaders"] = [{"name": h["name"], "value": h["value"]} for h in headers]
    out["port"] = _port(spec.get("port"), container, f"{where}.port")
    return out


def _port(port: object, container: dict, where: str) -> int:
    if isinstance(port, str) and not port.isdigit():
        named = [p.get("containerPort") for p in container.get("ports") or ()
                 if isinstance(p, dict) and p.get("name") == port]
        if not named:
            raise Refused(f"{where} names the port {port!r}, which the container does not declare; nothing was written")
        port = named[0]
    number = int(port) if isinstance(port, (int, str)) and not isinstance(port, bool) and str(port).isdigit() else 0
    if not 1 <= number <= 65535:
        raise Refused(f"{where} is {port!r}, not a port number or name; nothing was written")
    return number


def _describe(kind: str, check: dict) -> str:
    if kind == "exec":
        return f"exec `{' '.join(check['command'])}`"
    where = f"{check.get('host') or '(the pod IP)'}:{check['port']}"
    if kind == "tcpSocket":
        return f"tcpSocket {where}"
    return f"httpGet {check.get('scheme', 'HTTP').lower()}://{where}{check.get('path') or '/'}"
