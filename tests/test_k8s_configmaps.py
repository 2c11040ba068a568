"""containers.k8s_overlay: the ConfigMap split at the API server's 1 MiB data limit, and its refusal."""

from __future__ import annotations

import pytest

from vllm_hotfix.containers.k8s_overlay import CONFIGMAP_LIMIT, Item, config_key, plan_configmaps
from vllm_hotfix_guard.errors import Refused


def item(key: str, size: int) -> Item:
    return Item(key, f"files/{key}", size, f"/site/{key}")


def test_exactly_the_limit_fits_one_byte_more_splits():
    exact = [item("a", 1000), item("b", CONFIGMAP_LIMIT - 1000 - 2)]  # keys count: 1 + 1
    (one,) = plan_configmaps(exact, "hf")
    assert one.size == CONFIGMAP_LIMIT and one.name == "hf-0"
    over = [item("a", 1000), item("b", CONFIGMAP_LIMIT - 1000 - 1)]
    first, second = plan_configmaps(over, "hf")
    assert (first.size, second.size) == (1001, CONFIGMAP_LIMIT - 1000) and second.name == "hf-1"


def test_one_file_over_the_limit_is_refused_naming_bake():
    plan_configmaps([item("a", CONFIGMAP_LIMIT - 1)], "hf")
    with pytest.raises(Refused) as caught:
        plan_configmaps([item("a", CONFIGMAP_LIMIT)], "hf")
    assert "does not fit in one ConfigMap" in caught.value.message and "hotfix bake" in caught.value.hint


def test_more_configmaps_than_allowed_is_refused_naming_bake():
    items = [item(f"f{i}", CONFIGMAP_LIMIT // 2 + 1) for i in range(9)]
    assert len(plan_configmaps(items, "hf", max_configmaps=9)) == 9
    with pytest.raises(Refused) as caught:
        plan_configmaps(items, "hf", max_configmaps=8)
    assert "9 ConfigMaps" in caught.value.message and "hotfix bake" in caught.value.hint


def test_keys_are_valid_configmap_keys_and_unique():
    keys = {config_key(i, p) for i, p in enumerate(["vllm/a b.py", "vllm_ascend/a b.py", "x/ü.py"])}
    assert keys == {"000.a_b.py", "001.a_b.py", "002._.py"}
