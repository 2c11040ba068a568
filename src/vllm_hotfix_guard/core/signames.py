"""The names and sizes of signature files beside a signed file (minisign's format: core/minisign.py),
without the verifier. What finds and reads them (txn/signed.signature_files) needs these alone: the guard
keys its verdict cache on the files read (trust.py) and, on a hit, never imports core.minisign or
core.trust_policy. No imports at all: the guard reads signature files in every vLLM process a trust
policy applies to."""

SUFFIX = ".minisig"
SIGNATURE_FILE_LIMIT = 4 + 2 * 1024 + 8192 + 200  # the four lines at their longest
MAX_SIGNATURES = 32  # signature files considered beside one signed file


def is_signature_name(name: str, signed_name: str) -> bool:
    """``name`` is one of ``minisign.signature_name(signed_name, ...)``, or names the key id as minisign 0.11
    prints it in a .pub file's comment: without its leading zeros (0.12 pads it to 16 digits, as we do)."""
    if name == signed_name + SUFFIX:
        return True
    if not name.startswith(signed_name + ".") or not name.endswith(SUFFIX):
        return False
    middle = name[len(signed_name) + 1:-len(SUFFIX)]
    return 0 < len(middle) <= 16 and all(c in "0123456789ABCDEF" for c in middle)
