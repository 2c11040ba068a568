"""`hotfix where PACKAGE`: which files `import PACKAGE` really loads, from what install."""

from __future__ import annotations

from vllm_hotfix_guard.output import emit_json, say
from vllm_hotfix.flow.resolve import Resolver
from vllm_hotfix.install.locate import Target


def describe(target: Target) -> list[tuple[str, str]]:
    """Label/value rows shared by human output of where and audit."""
    rows = [
        ("package", target.package),
        ("distribution", f"{target.distribution or '(none)'} {target.version or ''}".rstrip()
         + (f" (derived from {target.version_from})" if target.version_from else "")),
        ("kind", target.kind),
        ("path", str(target.package_dir)),
        ("root", str(target.root)),
        ("dist-info", str(target.dist_info) if target.dist_info else "(none)"),
        ("python", f"{target.python} ({target.python_version})" if target.python_version else str(target.python)),
    ]
    if target.git is not None:
        state = "clean" if target.git.clean else f"dirty: {len(target.git.dirty)} file(s)"
        rows.append(("git", f"{(target.git.commit or '(no commit)')[:12]} {target.git.branch or '(detached)'} "
                            f"{target.git.describe or ''} {state}".replace("  ", " ")))
    if target.import_file or target.import_error:
        rows.append(("import", target.import_file or f"import {target.package} failed: {target.import_error} (path above is from find_spec)"))
    return rows


def print_block(rows: list[tuple[str, str]], warnings: tuple[str, ...] = ()) -> None:
    width = max(len(label) for label, _ in rows) + 1
    for label, value in rows:
        say(f"{label + ':':<{width}} {value}")
    for warning in warnings:
        say(f"WARNING: {warning}")


def run(*, package: str, python: str | None = None, root=None, do_import: bool = False, as_json: bool = False) -> int:
    from vllm_hotfix_guard.install.mounts import mounts_below

    if root is not None and do_import:
        from vllm_hotfix_guard.errors import UsageError

        raise UsageError("--import runs `import PACKAGE` in an interpreter: give --python, not --root")
    target = Resolver(python, root).package(package, do_import=do_import)
    mounts = list(mounts_below(target.package_dir).values())  # files that do not come from the install itself
    if as_json:
        emit_json(dict(target.to_json(), mounts=[m.to_json() for m in mounts]))
        return 0
    rows = describe(target)
    for mount in mounts:
        rows.append(("mounted", f"{mount.point}: a bind mount from {mount.source}"
                                f"{' (read-only)' if mount.read_only else ''}; a rebuild without the mount loses it"))
    print_block(rows, target.warnings)
    if target.git is not None and target.git.dirty:
        for line in target.git.dirty[:20]:
            say(f"  {line}")
        if len(target.git.dirty) > 20:
            say(f"  ... and {len(target.git.dirty) - 20} more")
    return 0
