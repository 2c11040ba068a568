"""The names other programs and people see -- files and environment variables -- defined once.

No imports: the in-process guard reads these in every vLLM process, configured or not.
"""

STATE_DIR_ENV = "HOTFIX_STATE_DIR"  # where records, journals and kept originals live
LOCK_ENV = "HOTFIX_LOCK"            # the guard and `hotfix verify`: the lock file to check
REQUIRE_ENV = "HOTFIX_REQUIRE"      # the guard: ids that must be recorded as applied for the copy loaded
STRICT_ENV = "HOTFIX_STRICT"        # the guard: stop a serving process whose hotfix is not in effect
READY_DIR_ENV = "HOTFIX_READY_DIR"  # the memory-backed directory of the processes' readiness records
TRUST_CACHE_DIR = "trust-verdicts"  # in HOTFIX_READY_DIR: the trust verdicts' cache (trust.py)
LOCK_CACHE_DIR = "lock-verdicts"    # in HOTFIX_READY_DIR: the lock verdicts' cache (lock_cache.py)
LOCK_NAME = "hotfix.lock"           # what `hotfix export` writes beside the exported files
CONTAINER_LOCK = "/etc/vllm-hotfix/hotfix.lock"  # where compose, k8s and bake put it in the container
FINGERPRINT_ANNOTATION = "vllm-hotfix.io/fingerprint"  # a pod's: the fingerprint of the hotfix set it runs
EXPECT_FINGERPRINT_ENV = "HOTFIX_EXPECT_FINGERPRINT"  # `ready`: the fingerprint the mounted lock must have (the pod's annotation)
OCI_PREFIX = "io.vllm-hotfix."      # our keys among a hotfix bundle's OCI annotations and image labels
TRUST_ENV = "HOTFIX_TRUST"          # the trust policy (TOML) locks and catalogs must satisfy
TRUST_CHAIN_ENV = "HOTFIX_TRUST_CHAIN"  # a directory of newer policies, each signed by the one before
CONTAINER_TRUST = "/etc/vllm-hotfix/trust.toml"  # where an image pins its policy (read-only, not the lock's)
PASSWORD_ENV = "HOTFIX_KEY_PASSWORD"            # `hotfix sign`: the secret key's password (CI)
PASSWORD_FILE_ENV = "HOTFIX_KEY_PASSWORD_FILE"  # `hotfix sign`: a file holding it (a mounted secret)
READY_DIR_ENV = "HOTFIX_READY_DIR"  # the memory-backed directory of the processes' readiness records
CATALOG_SUMS = "hotfix-catalog.sha256"  # a signed catalog's list of files and sha256, as sha256sum writes it


def required_ids(value: str) -> tuple[str, ...]:
    """The hotfix ids a HOTFIX_REQUIRE value names (comma-separated, blanks around each dropped, each once, in
    order) -- the one reading, for the guard and `hotfix guard --check-env`. A value that is set but names
    none (" , ") gives (""): an id no record can hold, judged invalid, never "nothing to check"."""
    ids = tuple(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))
    return ids or (("",) if value.strip() else ())
