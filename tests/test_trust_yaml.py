"""Issue 31, YAML aliases: a half-KB compose file or Kubernetes manifest whose aliases stand for 387
million nodes (9 levels of 9) is refused while loading (exit 8, containers/yamledit.check_aliases), the
file left as it was, and a real file with anchors, as people write them, still loads. (The peers: go-yaml
refuses "excessive aliasing" when it decodes into values, but on this file docker compose v2.40.3 and
kubectl kustomize v5.5.0 were both still at work after 60 s, 2026-12-02: no test waits for them.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fixtures.composefiles import HOTFIX, write_export
from fixtures.kube import DEPLOYMENT, make_export
from fixtures.trees import snapshot


def bomb(levels: int = 9, fan: int = 9) -> str:
    lines = ["  a: &a [" + ", ".join(['"x"'] * fan) + "]"]
    for previous, name in zip("abcdefghij", "bcdefghijk"[:levels]):
        lines.append(f"  {name}: &{name} [" + ", ".join([f"*{previous}"] * fan) + "]")
    return "x-bomb:\n" + "\n".join(lines) + f"\nservices:\n  vllm:\n    image: x\n    volumes: *{'abcdefghij'[levels]}\n"


def hotfix(*args, cwd=None, env=None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "vllm_hotfix", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=full)


def test_an_alias_bomb_in_a_compose_file_is_refused_while_loading(tmp_path):
    compose = tmp_path / "compose.yaml"
    compose.write_text(bomb())
    assert len(compose.read_bytes()) < 600
    export = write_export(tmp_path / "hotfix-export")
    before = snapshot(tmp_path)
    for extra in ((), ("--dry-run",), ("--remove",)):
        done = hotfix("compose", HOTFIX, "--service", "vllm", "--export-dir", export, "--file", compose, "--no-guard", "--no-strict",
                      *extra)
        assert done.returncode == 8, (extra, done.stderr)
        assert "YAML aliases here stand for more than 100,000 nodes (excessive aliasing" in done.stderr
    assert snapshot(tmp_path) == before


def test_an_alias_bomb_as_the_kubernetes_base_is_refused(tmp_path):
    export = make_export(tmp_path / "export")
    base = tmp_path / "rendered.yaml"
    base.write_text(DEPLOYMENT + "---\n" + bomb().replace("services:\n  vllm:\n    image: x\n    volumes:",
                                                           "kind: ConfigMap\napiVersion: v1\ndata: {x: y}\nbomb:"))
    done = hotfix("k8s", "--export-dir", export, "--base", base, "--to", tmp_path / "overlay", "--workload",
                  "deployment/vllm", "--container", "vllm", env={"HOTFIX_KUBECTL": ""})
    assert done.returncode == 8 and "excessive aliasing" in done.stderr, done.stderr
    assert not (tmp_path / "overlay").exists()


def test_a_recursive_alias_is_refused():
    from vllm_hotfix.containers.yamledit import compose
    from vllm_hotfix_guard.errors import InvalidInput

    with pytest.raises(InvalidInput, match="recursive alias"):
        compose("a: &a [1, *a]\n", "x.yaml")


def test_anchors_as_people_write_them_still_load():
    from vllm_hotfix.containers.yamledit import compose

    common = "x-env: &env\n  NCCL_DEBUG: WARN\n  HF_HOME: /models\n"
    services = "".join(f"  vllm{i}:\n    image: x\n    environment: *env\n    <<: *base\n" for i in range(200))
    compose(common + "x-base: &base\n  restart: always\n  shm_size: 32g\nservices:\n" + services, "compose.yaml")
    compose(bomb(levels=3), "compose.yaml")  # 9**4 = 6,561 leaves: fine
