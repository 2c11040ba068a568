"""vllm-hotfix: apply, verify and roll back vLLM / vllm-ascend hotfixes safely."""

__version__ = "0.1.0"
