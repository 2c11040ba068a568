"""One distribution-name rule: core/distname.canonical_name (stdlib, for the guard, locks and records)
is packaging.utils.canonicalize_name, and install/probe.py's copy (sent whole to the target) agrees."""

import pytest
from packaging.utils import canonicalize_name

from vllm_hotfix_guard.core.distname import canonical_name
from vllm_hotfix_guard.install.probe import dist_info_name

NAMES = ["vllm", "vLLM", "vllm-ascend", "vllm_ascend", "Vllm.Ascend", "vllm--ascend", "vllm-_.ascend",
         "_leading", "trailing_", "-", "a.b-c_d", "Flash_Attn", "zope.interface", "ÄÖ_x", ""]


@pytest.mark.parametrize("name", NAMES)
def test_the_stdlib_rule_is_packagings(name):
    assert canonical_name(name) == canonicalize_name(name)


@pytest.mark.parametrize("name", NAMES)
def test_the_probes_copy_agrees(name):
    assert dist_info_name(name) == canonicalize_name(name).replace("-", "_")


@pytest.mark.parametrize("given,wanted", [("vllm-ascend", "vllm_ascend"), ("vllm_ascend", "vllm_ascend"),
                                          ("Vllm-Ascend", "vllm_ascend"), ("vllm.ascend-x", "vllm_ascend_x"),
                                          ("vllm", "vllm"), ("yaml", "yaml")])
def test_a_distribution_name_is_taken_for_its_import_name(given, wanted):
    from vllm_hotfix_guard.core.distname import import_name

    assert import_name(given) == wanted


@pytest.mark.parametrize("path", ["vllm/config/cache.py", "vllm/__init__.py", "vllm_ascend/ops/__init__.py", "a.py",
                                  "vllm/v1/worker/gpu/model_states/mamba_hybrid.py", "x/__init__/y.py", "x/y__init__.py"])
def test_the_code_probe_s_module_name_copy_agrees(path):
    """core/codeprint.py is sent whole to the target interpreter (install/codeprobe.py), so it keeps its own copy of
    the path-to-module rule the guard takes from core/distname.py: one answer."""
    from vllm_hotfix_guard.core import codeprint, distname

    assert codeprint.module_name(path) == distname.module_name(path)
