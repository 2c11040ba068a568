"""vllm-hotfix: apply, verify and roll back vLLM / vllm-ascend hotfixes safely.

The in-process guard is its own package, ``vllm_hotfix_guard`` (stdlib only): this one stands on it.
"""

__version__ = "0.1.0"
