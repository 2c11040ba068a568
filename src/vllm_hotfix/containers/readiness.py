"""What `k8s` and `compose` add for readiness (docs/readiness.md): a memory-backed directory for the guard's
records (an ``emptyDir`` of medium Memory / a tmpfs) at READY_IN_CONTAINER, HOTFIX_READY_DIR naming it, and
``python -m vllm_hotfix_guard ready`` as the readinessProbe / healthcheck. Pure values, no I/O."""

from __future__ import annotations

from typing import Optional

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
    our exec would make one probe with two handlers, which the API server refuses)."""
    return {"readinessProbe": {"$patch": "replace", **probe}} if probe is not None else {}


def lws_probe(found: dict, containers: tuple[str, ...], probe: Optional[dict]) -> list[dict]:
    """The readinessProbe of the leader's named containers (its `vllm serve` command line is what `ready`
    reads; a worker pod's processes, Ray's or headless, are told by hand: docs/readiness.md)."""
    lwt = (found.get("spec") or {}).get("leaderWorkerTemplate") or {}
    template = "leaderTemplate" if "leaderTemplate" in lwt else None
    if probe is None or template is None:
        return []
    names = [c.get("name") for c in ((lwt[template] or {}).get("spec") or {}).get("containers") or ()]
    return [{"op": "add", "path": f"/spec/leaderWorkerTemplate/{template}/spec/containers/{i}/readinessProbe",
             "value": probe} for i, n in enumerate(names) if n in containers]
