"""What the code check has learned in this process, shared by code.py (it fills it from ``register()`` on),
judge.py (it judges with it) and watch.py: the fixed objects the import watch executed, the fingerprints
compiled from verified files, the modules an earlier copy of which existed, vLLM's plugin packages. Its own
module so that ``register()`` does not load judge.py, which only runs at a checkpoint or an import of a
fixed module (the guard's budget, docs/design.md). Stdlib only, nothing imported.
"""

from __future__ import annotations

FIXED: dict = {}           # (module, qualname) -> (binding, codes): what the import watch compiled, just executed
PRINTS: dict = {}          # module -> {qualname: fingerprint} compiled here from the verified file (lazily)
EARLIER: set = set()       # modules of which an earlier copy existed: aliases of it may be stale
PLUGIN_PACKAGES: set = set()  # top-level packages of vLLM's plugins: where stale aliases are looked for
LOCK_PRINTS = {"usable": False}  # the lock's fingerprints hold for this interpreter (cache tag, optimize 0)


def attr(obj, name: str, default=None):
    """getattr that no object can break: vLLM's PlaceholderModule (an optional dependency's stand-in in
    sys.modules and module globals) raises ModuleNotFoundError for any name; a proxy may raise anything."""
    try:
        return getattr(obj, name, default)
    except Exception:  # noqa: BLE001
        return default
