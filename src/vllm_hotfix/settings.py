"""The names other programs and people see -- files and environment variables -- defined once.

No imports: the in-process guard reads these in every vLLM process, configured or not.
"""

STATE_DIR_ENV = "HOTFIX_STATE_DIR"  # where records, journals and kept originals live
LOCK_ENV = "HOTFIX_LOCK"            # the guard and `hotfix verify`: the lock file to check
REQUIRE_ENV = "HOTFIX_REQUIRE"      # the guard: ids that must be recorded as applied for the copy loaded
STRICT_ENV = "HOTFIX_STRICT"        # the guard: stop a serving process whose hotfix is not in effect
LOCK_NAME = "hotfix.lock"           # what `hotfix export` writes beside the exported files
CONTAINER_LOCK = "/etc/vllm-hotfix/hotfix.lock"  # where compose, k8s and bake put it in the container
FINGERPRINT_ANNOTATION = "vllm-hotfix.io/fingerprint"  # a pod's: the fingerprint of the hotfix set it runs
OCI_PREFIX = "io.vllm-hotfix."      # our keys among a hotfix bundle's OCI annotations and image labels
STATE_NAME = "state.json"           # a target's record
JOURNAL_NAME = "journal.json"       # a target's pending transaction
HISTORY_NAME = "history.jsonl"      # a target's changes, one JSON line each (`hotfix log`)
HISTORY_ROTATED = "history.1.jsonl" # the lines before those, once history.jsonl was full
