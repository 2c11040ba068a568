"""Thin command line: parse, dispatch to ``commands.<name>.run``, turn errors into exit codes.

Every command module exposes ``run(*, explicit keywords) -> int``, called with every option by name. Nothing here touches files.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from vllm_hotfix import __version__, cli_bundles, cli_feed, cli_signing
from vllm_hotfix.cli_help import EXIT_CODES_HELP, GROUP_HELP, texts
from vllm_hotfix.cli_options import (
    ADMISSION_PARAMS, OVERLAY_PARAMS, admission_options, all_targets_option, catalog_option, complete_ids, dry_run_option,
    given_options, guard_options, json_option, tags_repo_option, k8s_overlay_options, compose_edit_options, lock_fields_options, python_option, root_option,
    runtime_options, to_version_option,
)
from vllm_hotfix_guard.errors import ExitCode, HotfixError
from vllm_hotfix_guard.txn.fsops import hold_signals_to_the_end
from vllm_hotfix_guard.output import emit_json, error_lines, finish_output, note, terminal_width
from vllm_hotfix_guard.settings import LOCK_ENV


HELP_WIDTH = 100  # --help fits the terminal up to this; into a pipe, this wide


def _exit(code: int) -> None:
    raise SystemExit(code)


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": HELP_WIDTH},
    help=GROUP_HELP, epilog=EXIT_CODES_HELP,
)
@click.version_option(__version__, "--version", prog_name="hotfix")
def cli() -> None:
    pass


@cli.command("apply", **texts("apply"))
@click.argument("hotfix_ids", nargs=-1, metavar="[ID]...", shell_complete=complete_ids)
@click.option("--patch", "patch_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Apply this raw diff instead of a catalog hotfix.")
@root_option("to patch")
@python_option
@click.option("--package", default=None, help="Import name of the package an ad-hoc --patch targets (with --python).")
@click.option("--id", "adhoc_id", default=None, help="Name to record an ad-hoc --patch under (default: the file name without extension).")
@click.option("-p", "strip", type=click.IntRange(min=0), default=None, help="Strip N leading path components (default 1, as git apply).")
@click.option("--patch-file", "patch_files", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path), help="A separately distributed patch file a manifest asks for (repeatable).")
@click.option("--upstream-repo", type=click.Path(exists=True, file_okay=False, path_type=Path), help="Local clone holding the upstream commits a manifest names.")
@click.option("--checkout", "checkouts", multiple=True, metavar="DIST=DIR", help="Where another checkout a hotfix requires is (e.g. vllm=/srv/vllm), instead of the manifest's root_hint (repeatable).")
@click.option("--reverse", "-R", is_flag=True, help="Apply the patch in reverse (raw --patch only; for hotfixes use rollback).")
@dry_run_option
@catalog_option
@json_option
def apply_cmd(hotfix_ids, patch_file, root, python, package, adhoc_id, strip, patch_files, upstream_repo, checkouts, reverse, dry_run, catalogs, as_json) -> None:
    from vllm_hotfix.commands import apply as command

    _exit(command.run(hotfix_ids=tuple(hotfix_ids), patch_file=patch_file, root=root, python=python, package=package, adhoc_id=adhoc_id, strip=strip, patch_files=tuple(patch_files), upstream_repo=upstream_repo, checkouts=tuple(checkouts), reverse=reverse, dry_run=dry_run, catalogs=tuple(catalogs), as_json=as_json))


@cli.command("status", **texts("status"))
@click.argument("hotfix_ids", nargs=-1, metavar="[ID]...", shell_complete=complete_ids)
@python_option
@root_option("to inspect")
@all_targets_option("Every target recorded in the state directory, its series and words; gone ones marked STALE.")
@runtime_options
@catalog_option
@json_option
@click.option("--vex", is_flag=True, help="Print an OpenVEX document instead: fixed / affected per hotfix with a known upstream issue (docs/feed.md).")
def status_cmd(hotfix_ids, python, root, all_targets, runtime, lock_file, catalogs, as_json, vex) -> None:
    from vllm_hotfix.commands import status as command

    _exit(command.run(hotfix_ids=tuple(hotfix_ids), python=python, root=root, catalogs=tuple(catalogs), all_targets=all_targets, as_json=as_json, runtime=runtime, lock_file=lock_file, vex=vex))


@cli.command("log", **texts("log"))
@click.argument("hotfix_id", required=False, metavar="[ID]", shell_complete=complete_ids)
@python_option
@root_option("whose history to show")
@all_targets_option("The history of every target recorded in the state directory.")
@catalog_option
@json_option
def log_cmd(hotfix_id, python, root, all_targets, catalogs, as_json) -> None:
    from vllm_hotfix.commands import log as command

    _exit(command.run(hotfix_id=hotfix_id, python=python, root=root, all_targets=all_targets, catalogs=tuple(catalogs), as_json=as_json))


@cli.command("verify", **texts("verify"))
@click.argument("hotfix_ids", nargs=-1, metavar="[ID]...", shell_complete=complete_ids)
@python_option
@root_option("to verify")
@click.option("--lock", "lock_file", type=click.Path(dir_okay=False, path_type=Path), envvar=LOCK_ENV, help="Verify against a lock file written by `hotfix export` (env HOTFIX_LOCK).")
@catalog_option
@json_option
def verify_cmd(hotfix_ids, python, root, lock_file, catalogs, as_json) -> None:
    from vllm_hotfix.commands import verify as command

    _exit(command.run(hotfix_ids=tuple(hotfix_ids), python=python, root=root, lock_file=lock_file, catalogs=tuple(catalogs), as_json=as_json))


@cli.command("rollback", **texts("rollback"))
@click.argument("hotfix_id", metavar="ID", shell_complete=complete_ids)
@python_option
@root_option("to roll the hotfix back in")
@to_version_option
@dry_run_option
@catalog_option
@json_option
def rollback_cmd(hotfix_id, python, root, to_version, dry_run, catalogs, as_json) -> None:
    from vllm_hotfix.commands import rollback as command

    _exit(command.run(hotfix_id=hotfix_id, python=python, root=root, dry_run=dry_run, catalogs=tuple(catalogs), as_json=as_json, to_version=to_version))


@cli.command("recover", **texts("recover"))
@python_option
@root_option("to recover")
@catalog_option
@dry_run_option
@json_option
def recover_cmd(python, root, catalogs, dry_run, as_json) -> None:
    from vllm_hotfix.commands import recover as command

    _exit(command.run(python=python, root=root, catalogs=tuple(catalogs), dry_run=dry_run, as_json=as_json))


@cli.command("where", **texts("where"))
@click.argument("package")
@python_option
@root_option("to inspect")
@click.option("--import", "do_import", is_flag=True, help="Also run the real `import PACKAGE` in that interpreter and compare.")
@json_option
def where_cmd(package, python, root, do_import, as_json) -> None:
    from vllm_hotfix.commands import where as command

    _exit(command.run(package=package, python=python, root=root, do_import=do_import, as_json=as_json))


@cli.command("audit", **texts("audit"))
@click.argument("package")
@python_option
@json_option
def audit_cmd(package, python, as_json) -> None:
    from vllm_hotfix.commands import audit as command

    _exit(command.run(package=package, python=python, as_json=as_json))


@cli.command("list", **texts("list"))
@catalog_option
@json_option
def list_cmd(catalogs, as_json) -> None:
    from vllm_hotfix.commands import list as command

    _exit(command.run(catalogs=tuple(catalogs), as_json=as_json))


@cli.command("show", **texts("show"))
@click.argument("hotfix_id", metavar="ID", shell_complete=complete_ids)
@catalog_option
@json_option
def show_cmd(hotfix_id, catalogs, as_json) -> None:
    from vllm_hotfix.commands import show as command

    _exit(command.run(hotfix_id=hotfix_id, catalogs=tuple(catalogs), as_json=as_json))


@cli.command("doctor", **texts("doctor"))
@click.argument("logs", nargs=-1, metavar="[LOG]...")
@python_option
@root_option("to check for the fix")
@click.option("--all", "show_all", is_flag=True, help="List the first error of every process, not only the first 8.")
@catalog_option
@json_option
def doctor_cmd(logs, python, root, show_all, catalogs, as_json) -> None:
    from vllm_hotfix.commands import doctor as command

    _exit(command.run(logs=tuple(logs), python=python, root=root, catalogs=tuple(catalogs), as_json=as_json,
                      show_all=show_all))


@cli.command("new", **texts("new"))
@click.argument("hotfix_id", metavar="ID")
@click.option("--from-commit", "commit", help="Upstream commit to turn into a patch.")
@click.option("--repo", type=click.Path(exists=True, file_okay=False, path_type=Path), help="Local clone holding --from-commit.")
@click.option("--exclude", multiple=True, help="Glob of paths to leave out (repeatable).")
@click.option("--add-patch", "add_patches", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Extra diff file applied after the commit (repeatable).")
@click.option("--from-install", "from_install", metavar="PACKAGE", help="Make the patch from files edited by hand in an installed wheel.")
@click.option("--from-release", "from_release", metavar="DIST==X.Y.Z", help="Make a hotfix for --base from the Python files a published patch release changed.")
@click.option("--base", metavar="X.Y.0", help="--from-release: the release the hotfix is for (default: X.Y.0 of the patch release).")
@click.option("--split-by-file", is_flag=True, help="--from-release: one hotfix per changed file (ID-<file>) instead of one for the release.")
@python_option
@click.option("--target", "distribution", help="Distribution the hotfix targets (vllm, vllm-ascend).")
@click.option("--versions", help="PEP 440 range the hotfix applies to, e.g. '>=0.29,<0.32' (--from-install: default ==installed).")
@click.option("--wheel", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="--from-install: the pristine wheel of the installed release (default: cached, else pip download).")
@click.option("--include-applied", is_flag=True, help="--from-install: also fold in the changes of the hotfixes recorded on that install (default: only the edits made on top of them).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True, help="Catalog directory to write manifests/ and patches/ into.")
@dry_run_option
@json_option
def new_cmd(hotfix_id, commit, repo, exclude, add_patches, from_install, from_release, base, split_by_file, python, distribution, versions, wheel, include_applied, out_dir, dry_run, as_json) -> None:
    from vllm_hotfix.commands import new as command

    _exit(command.run(hotfix_id=hotfix_id, commit=commit, repo=repo, exclude=tuple(exclude), add_patches=tuple(add_patches), from_install=from_install, from_release=from_release, base=base, split_by_file=split_by_file, python=python, distribution=distribution, versions=versions, wheel=wheel, include_applied=include_applied, out_dir=out_dir, dry_run=dry_run, as_json=as_json))


@cli.command("check-catalog", **texts("check-catalog"))
@click.option("--versions", help="Only these releases, e.g. '0.30.0,0.31.0' or a range '>=0.30'.")
@click.argument("hotfix_ids", nargs=-1, metavar="[ID]...", shell_complete=complete_ids)
@tags_repo_option
@catalog_option
@json_option
def check_catalog_cmd(versions, hotfix_ids, repo, catalogs, as_json) -> None:
    from vllm_hotfix.commands import check_catalog as command

    _exit(command.run(versions=versions, hotfix_ids=tuple(hotfix_ids), repo=repo, catalogs=tuple(catalogs), as_json=as_json))


@cli.command("port", **texts("port"))
@click.argument("hotfix_id", metavar="ID", shell_complete=complete_ids)
@click.option("--versions", help="Releases to port to: '0.26.0,0.27.0' or a range '>=0.26,<0.32' (default: the hotfix's range and fixed_in).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Catalog directory for the copy of the hotfix with its new variants (its own catalog directory: updated in place).")
@tags_repo_option
@catalog_option
@dry_run_option
@json_option
def port_cmd(hotfix_id, versions, out_dir, repo, catalogs, dry_run, as_json) -> None:
    from vllm_hotfix.commands import port as command

    _exit(command.run(hotfix_id=hotfix_id, versions=versions, catalogs=tuple(catalogs), out_dir=out_dir, repo=repo, dry_run=dry_run, as_json=as_json))


@cli.command("contains", **texts("contains"))
@click.argument("hotfix_id", required=False, metavar="[ID]", shell_complete=complete_ids)
@click.option("--patch", "patch_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="A raw diff to look for instead of a catalog hotfix.")
@python_option
@root_option("to look for the fix in")
@click.option("--versions", help="Published releases instead of an install: '0.30.0,0.31.0' or a range '>=0.29' (a matrix, read from the real wheels).")
@click.option("--package", default=None, help="--patch with --python: the import name its paths are under (default vllm).")
@click.option("--target", "distribution", default=None, help="--patch with --versions: the distribution whose releases to read (default vllm).")
@click.option("-p", "strip", type=click.IntRange(min=0), default=None, help="Strip N leading path components of --patch (default 1).")
@tags_repo_option
@catalog_option
@json_option
def contains_cmd(hotfix_id, patch_file, python, root, versions, package, distribution, strip, repo, catalogs, as_json) -> None:
    from vllm_hotfix.commands import contains as command

    _exit(command.run(hotfix_id=hotfix_id, patch_file=patch_file, python=python, root=root, versions=versions, package=package, distribution=distribution, strip=strip, repo=repo, catalogs=tuple(catalogs), as_json=as_json))


@cli.command("export", **texts("export"))
@click.argument("hotfix_ids", nargs=-1, required=True, metavar="ID...", shell_complete=complete_ids)
@click.option("--to", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Directory for the patched files and hotfix.lock.")
@lock_fields_options
@python_option
@catalog_option
@dry_run_option
@json_option
def export_cmd(hotfix_ids, out_dir, lock_version, expires, with_guard, python, catalogs, dry_run, as_json) -> None:
    from vllm_hotfix.commands import export as command

    _exit(command.run(hotfix_ids=tuple(hotfix_ids), out_dir=out_dir, python=python, catalogs=tuple(catalogs), dry_run=dry_run, as_json=as_json, lock_version=lock_version, expires=expires, with_guard=with_guard))


@cli.command("compose", **texts("compose"))
@click.argument("hotfix_ids", nargs=-1, metavar="ID...", shell_complete=complete_ids)
@click.option("--service", required=True, help="Compose service to mount the patched files into.")
@click.option("--file", "compose_file", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Compose file to edit in place, byte for byte outside our lines (default: as docker compose v2 finds it: COMPOSE_FILE, else compose.yaml, compose.yml, docker-compose.yaml, docker-compose.yml here or above).")
@click.option("--override", "override_file", type=click.Path(dir_okay=False, path_type=Path), help="Write the mounts to this override file instead of editing --file.")
@click.option("--export-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("hotfix-export"), show_default=True, help="Directory written by `hotfix export`.")
@click.option("--container-site-packages", help="site-packages path inside the container (default: the one the lock recorded; a warning when that looks like a host venv).")
@compose_edit_options
@dry_run_option
@json_option
def compose_cmd(hotfix_ids, service, compose_file, override_file, export_dir, container_site_packages, remove, readiness, with_guard, strict, dry_run, as_json) -> None:
    from vllm_hotfix.commands import compose as command

    _exit(command.run(hotfix_ids=tuple(hotfix_ids), service=service, compose_file=compose_file, override_file=override_file, export_dir=export_dir, container_site_packages=container_site_packages, remove=remove, readiness=readiness, with_guard=with_guard, strict=strict, dry_run=dry_run, as_json=as_json))


@cli.command("k8s", **texts("k8s"))
@k8s_overlay_options
@admission_options
@dry_run_option
@json_option
def k8s_cmd(export_dir, base, out_dir, workload, kind, name, containers, container_site_packages, strict, max_configmaps, readiness, bundle, bundle_dir, trust_configmap, with_guard, admission, approve, namespaces, params_namespace, warn_only, trust, dry_run, as_json) -> None:
    if admission:
        from vllm_hotfix.commands import admission as command

        _exit(command.run(approve=tuple(approve), namespaces=tuple(namespaces), params_namespace=params_namespace, warn_only=warn_only, trust=trust, out_dir=out_dir, overlay_options=given_options(OVERLAY_PARAMS), dry_run=dry_run, as_json=as_json))
    from vllm_hotfix.commands import k8s as command

    _exit(command.run(export_dir=export_dir, out_dir=out_dir, base=base, workload=workload, kind=kind, name=name, containers=tuple(containers), container_site_packages=container_site_packages, strict=strict, max_configmaps=max_configmaps, readiness=readiness, bundle=bundle, bundle_dir=bundle_dir, admission_options=given_options(ADMISSION_PARAMS), dry_run=dry_run, as_json=as_json, trust_configmap=trust_configmap, with_guard=with_guard))


@cli.command("bake", **texts("bake"))
@click.option("--export-dir", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path), help="What `hotfix export` wrote: hotfix.lock, the patched files and the guard.")
@click.option("--base", required=True, help="Image to derive from, e.g. vllm/vllm-openai:v0.30.0 or a vllm-ascend image.")
@click.option("--to", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Directory for the build context (Containerfile + vllm-hotfix/).")
@click.option("--container-site-packages", default=None, metavar="PATH", help="The image's site-packages (default: the purelib of --image-python, found at build time).")
@click.option("--image-python", "python", default="python3", show_default=True, help="The image's interpreter that runs vLLM.")
@click.option("--strict/--no-strict", default=True, show_default=True, help="HOTFIX_STRICT for the guard in the image.")
@dry_run_option
@json_option
def bake_cmd(export_dir, base, out_dir, container_site_packages, python, strict, dry_run, as_json) -> None:
    from vllm_hotfix.commands import bake as command

    _exit(command.run(base=base, export_dir=export_dir, out_dir=out_dir, container_site_packages=container_site_packages, python=python, strict=strict, dry_run=dry_run, as_json=as_json))


@cli.command("gc", **texts("gc"))
@click.option("--older-than", default="7d", show_default=True, metavar="AGE",
              help="Remove a missing target's state once it has been missing this long (s, m, h, d, w; 0: at once).")
@click.option("--confirm", "confirm", multiple=True, metavar="PATH",
              help="This target path is gone for good: remove its state now (repeatable).")
@dry_run_option
@json_option
def gc_cmd(older_than, confirm, dry_run, as_json) -> None:
    from vllm_hotfix.commands import gc as command

    _exit(command.run(dry_run=dry_run, as_json=as_json, older_than=older_than, confirm=tuple(confirm)))


@cli.command("guard", **texts("guard"))
@guard_options
@python_option
@json_option
def guard_cmd(print_env, check_env, build_dist, lock_file, require, strict, fmt, python, as_json) -> None:
    from vllm_hotfix.commands import guard as command

    _exit(command.run(print_env=print_env, check_env=check_env, build_dist=build_dist, lock_file=lock_file, require=require, strict=strict,
                      fmt=fmt, python=python, as_json=as_json))


cli.add_command(cli_signing.sign_cmd)
cli.add_command(cli_bundles.pack_cmd)
cli.add_command(cli_signing.trust_group)
cli.add_command(cli_feed.catalog_group)


def main(argv: list[str] | None = None) -> None:
    """Run the command; the exit code is what the command did (unwritable output is lost, never a code). Only
    as the entry point (no ``argv``) it holds SIGINT / SIGTERM to the end: a caller's children inherit a mask."""
    code = _run(sys.argv[1:] if argv is None else argv)
    finish_output()
    if argv is None:
        hold_signals_to_the_end()  # the code says what the command did to the files: no death by signal now
    sys.exit(code)


def _run(args: list[str]) -> int:
    wants_json = "--json" in args
    try:
        cli.main(args=args, prog_name="hotfix", standalone_mode=False, terminal_width=terminal_width() or HELP_WIDTH)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    except click.exceptions.UsageError as exc:
        where = f"hotfix {exc.ctx.command.name}" if exc.ctx is not None and exc.ctx.parent is not None else "hotfix"
        _report(exc.format_message(), f"`{where} --help` lists the arguments and options", int(ExitCode.USAGE),
                "UsageError", wants_json)
        return ExitCode.USAGE
    except click.exceptions.Abort:
        note("aborted")
        return 130
    except click.exceptions.ClickException as exc:
        _report(exc.format_message(), None, exc.exit_code, "UsageError", wants_json)
        return exc.exit_code
    except HotfixError as exc:
        _report(exc.message, exc.hint, int(exc.exit_code), type(exc).__name__, wants_json)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        note("interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001 - the one place that turns surprises into one line
        if isinstance(exc, ValueError) and "embedded null byte" in str(exc):  # a path from input holds a NUL
            _report("a path given holds a NUL byte; no file has such a name", None, int(ExitCode.INVALID_INPUT),
                    "InvalidInput", wants_json)
            return ExitCode.INVALID_INPUT
        if os.environ.get("HOTFIX_DEBUG"):
            raise
        _report(
            f"internal error: {type(exc).__name__}: {exc}",
            "rerun with HOTFIX_DEBUG=1 for a traceback and report it",
            int(ExitCode.INTERNAL),
            "InternalError",
            wants_json,
        )
        return ExitCode.INTERNAL
    return 0


def _report(message: str, hint: str | None, code: int, kind: str, wants_json: bool) -> None:
    """The one-line error (and hint); if even stderr cannot be written (a full disk under a redirect),
    the exit code alone has to speak, never a traceback."""
    if wants_json:
        emit_json({"error": {"kind": kind, "message": message, "hint": hint, "exit_code": code}})
    error_lines(message, hint)
