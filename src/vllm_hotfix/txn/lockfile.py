"""The old name of txn/hotfix_lock.py (hotfix.lock's reader, writer and check), kept while
containers/guard*.py import it: the guard's move to its own package renames those imports, then this goes."""

from vllm_hotfix.txn.hotfix_lock import (  # noqa: F401 - the names containers/guard*.py import
    TARGET_FILE_LIMIT, check_lock, fingerprint_entries, load_lock)
