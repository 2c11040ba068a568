"""`hotfix export`: patched files computed from a pristine install, plus hotfix.lock, for bind mounts.

Nothing in the install is changed (flow/export_plan.py plans the series and proves the baseline).
"""

from __future__ import annotations

from pathlib import Path

from vllm_hotfix_guard.output import emit_json, say


def run(*, hotfix_ids, out_dir: Path, python: str | None = None, catalogs=(), dry_run: bool = False,
        as_json: bool = False, lock_version: int | None = None, expires: str | None = None,
        with_guard: bool = True) -> int:
    from vllm_hotfix.catalog.index import Catalog, parse_ref
    from vllm_hotfix.flow.export_plan import plan_export, write_export

    guard = _guard(with_guard)  # refused before anything is planned or written
    catalog = Catalog.load(catalogs)
    manifests = [catalog.get(*parse_ref(ref)) for ref in hotfix_ids]
    from vllm_hotfix.containers.guard_dist import locked_files

    export = plan_export(manifests, python=python, out_dir=out_dir, lock_version=lock_version,
                         expires=expires_at(expires) if expires else None,
                         guard=locked_files(guard) if guard is not None else None, catalog=catalog)
    if not dry_run:
        write_export(out_dir, export)
        if guard is not None:
            from vllm_hotfix.containers.guard_dist import GUARD_DIR, tree_files
            from vllm_hotfix.txn.staged import write_directory

            write_directory(out_dir / GUARD_DIR, tree_files(guard), suffix=".hotfix-guard", what="the guard")
    lock, lock_path = export.lock, export.lock_path
    new = [h for h in lock.hotfixes if h.id in {m.id for m in manifests}]
    if as_json:
        emit_json({
            "to": str(out_dir), "dry_run": dry_run, "lock": str(lock_path), "site_packages": lock.site_packages,
            "lock_version": lock.version, "expires": lock.expires, "held": list(export.held),
            "guard": {"version": guard.version, "site_packages": str(out_dir / "guard" / "site-packages"),
                      "wheel": str(out_dir / "guard" / guard.wheel_name)} if guard is not None else None,
            "hotfixes": [{"id": h.id, "version": h.version, "baseline_version": h.baseline_version,
                          "files": [{"path": f.path, "export": f.export, "sha256": f.sha256,
                                     "baseline_sha256": f.baseline_sha256, "code": f.code.to_json() if f.code else None} for f in h.files]}
                         for h in lock.hotfixes],
        })
        return 0
    verb = "would export" if dry_run else "exported"
    for hotfix in new:
        say(f"{verb} {hotfix.id}@{hotfix.version} (from pristine {hotfix.distribution} {hotfix.baseline_version}):")
        for f in hotfix.files:
            shared = "" if f.export.startswith(hotfix.id + "/") else f" (the top of its series: {f.export.split('/')[0]})"
            say(f"  {out_dir / f.export}{shared}")
            if f.code is not None:
                say(f"    {f.code.describe()}")
            if f.path in export.held:
                say("    the installed file holds this change already (a bind mount or a hand apply): exported as it "
                    "is, its baseline (the patch reversed) proven against RECORD")
    if dry_run:
        say(f"dry run: would write {lock_path}; nothing was written")
        return 0
    if guard is not None:
        say(f"wrote {out_dir / 'guard'}: vllm-hotfix-guard {guard.version} (site-packages/{guard.top[0]}, "
            f"site-packages/{guard.top[1]}, {guard.wheel_name}), the guard the image needs")
    until = f", expires {lock.expires}" if lock.expires else ""
    say(f"wrote {lock_path} (version {lock.version}{until}, site-packages {lock.site_packages})")
    from vllm_hotfix.flow.mounted import compose_step

    say(f"next: {compose_step([h.id for h in lock.hotfixes], out_dir)}")
    return 0


def expires_at(text: str, now: float | None = None) -> str:
    """--expires: a duration from now ('30d', '12h', '2w') or a UTC time (YYYY-MM-DDTHH:MM:SSZ)."""
    import time

    from vllm_hotfix_guard.core.trust_policy import format_utc, parse_duration, parse_utc
    from vllm_hotfix_guard.errors import UsageError

    if parse_utc(text) is not None:
        return text
    seconds = parse_duration(text)
    if seconds is None or seconds == 0:
        raise UsageError(f"--expires {text!r}: expected a duration (30d, 12h, 2w) or a UTC time such as "
                         "2027-01-31T00:00:00Z")
    return format_utc(int(time.time() if now is None else now) + seconds)


def _guard(with_guard: bool):
    """The guard's distribution to write beside the files (None: --no-guard, refused in strict mode)."""
    import os

    from vllm_hotfix_guard.process import strict  # as the guard reads HOTFIX_STRICT
    from vllm_hotfix_guard.settings import STRICT_ENV

    if with_guard:
        from vllm_hotfix.containers.guard_dist import current

        return current()
    if strict():
        from vllm_hotfix_guard.errors import Refused

        value = os.environ[STRICT_ENV].strip()  # one of process.STRICT_VALUES, in any case
        raise Refused(f"--no-guard with {STRICT_ENV}={value}: a stock image would run without the guard, and strict "
                      "mode would stop nothing", hint=f"drop --no-guard (the guard goes into EXPORT/guard) or unset {STRICT_ENV}")
    return None
