"""What a signed lock adds to `hotfix k8s`'s overlay (containers/k8s.build calls these): the lock's signature
files as ConfigMap items mounted beside the lock, and the trust policy from a ConfigMap of its own
(``--trust-configmap``), never the lock's (docs/trust-guard.md: whoever writes the lock must not write
the policy)."""

from __future__ import annotations

import re
from typing import Optional

from vllm_hotfix_guard.errors import UsageError
from vllm_hotfix_guard.settings import CONTAINER_LOCK as LOCK_IN_CONTAINER, TRUST_ENV

TRUST_DIR = "/etc/vllm-hotfix-trust"  # --trust-configmap's mount: neither the lock's directory nor the image's pin
TRUST_KEY = "trust.toml"  # the key the policy's ConfigMap must hold


def signature_items(signatures, files: dict[str, bytes]) -> list[tuple[str, str, int, str]]:
    """The lock's signature files ((name, bytes), as txn.signed.signature_files reads them beside the
    export's lock) as ConfigMap items mounted read-only beside the lock -- (key, source, size, mount path),
    the fields of k8s_overlay.Item: the guard reads the ones beside HOTFIX_LOCK. Their bytes go into
    ``files`` (``signatures/NAME``)."""
    lock_dir = LOCK_IN_CONTAINER.rpartition("/")[0]
    items = []
    for name, data in signatures:
        files[f"signatures/{name}"] = data
        items.append((name, f"signatures/{name}", len(data), f"{lock_dir}/{name}"))
    return items


def trust_mount(configmap: Optional[str], generated: list[str], prefix: str, mounts: list, volumes: list,
                env: list) -> None:
    """``--trust-configmap NAME``: the trust policy from a ConfigMap the overlay does not generate (one only
    the release team may write), its ``trust.toml`` mounted read-only at TRUST_DIR and named by
    HOTFIX_TRUST. Whoever writes the lock must not write the policy: one of the lock's own ConfigMaps
    (``prefix-N``) is refused (exit 2)."""
    if configmap is None:
        return
    if configmap in generated or configmap == prefix or configmap.startswith(f"{prefix}-"):
        raise UsageError(f"--trust-configmap {configmap}: that is the lock's own ConfigMap ({prefix}-N); whoever "
                         f"writes the lock would choose who must have signed it",
                         hint="keep the policy in the image (/etc/vllm-hotfix/trust.toml) or in a ConfigMap of its "
                              "own that only the release team may change (`kubectl create configmap NAME "
                              "--from-file=trust.toml`)")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", configmap):
        raise UsageError(f"--trust-configmap {configmap!r}: not a ConfigMap name (lowercase DNS subdomain)")
    volumes.append({"name": f"{prefix}-trust-policy", "configMap": {"name": configmap, "items": [
        {"key": TRUST_KEY, "path": TRUST_KEY}]}})
    mounts.append({"name": f"{prefix}-trust-policy", "mountPath": TRUST_DIR, "readOnly": True})
    env.append({"name": TRUST_ENV, "value": f"{TRUST_DIR}/{TRUST_KEY}"})
