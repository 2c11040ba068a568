"""The options and help texts that several commands share (cli.py stays the list of commands)."""

from __future__ import annotations

from pathlib import Path

import click

EXIT_CODES_HELP = """\b
Exit codes:
  0  success / everything in effect
  1  not in effect (verify, status) or not pristine (audit)
  2  usage error
  3  refused: baseline not clean, checksum mismatch, version out of range,
     unmet precondition, unsafe path
  4  patch does not apply (conflict)
  5  fixed upstream: the target already contains the fix
  6  write failed (read-only file system, disk full); all files restored
  7  busy: another hotfix process holds the target's lock
  8  invalid input: malformed diff, manifest or lock file
  9  doctor: no known issue matches the logs
  10 unavailable: a release could not be listed or downloaded (check-catalog, new)
  70 internal error (HOTFIX_DEBUG=1 shows the traceback)
  130/143 interrupted by SIGINT/SIGTERM; every file was restored
"""


DOCTOR_EXIT_HELP = """\b
Exit codes of doctor:
  0  a known issue matches, and its fix is already in effect (applied / fixed upstream)
  1  a known issue matches and its fix is needed (not applied, lost, drifted, state unknown)
  2  usage error (unreadable log, bad option)
  8  invalid manifest in the catalog
  9  no known issue matches (or only ones for other releases)
"""


json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
python_option = click.option(
    "--python",
    "python",
    envvar="HOTFIX_PYTHON",
    metavar="PY",
    help="Interpreter whose installed package is the target (env HOTFIX_PYTHON; default: this one, "
    "else the one behind the `vllm` command on PATH).",
)
root_option = click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    help="A source checkout (e.g. /vllm-workspace/vllm-ascend) to patch instead of an installed package.",
)
catalog_option = click.option(
    "--catalog",
    "catalogs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Extra catalog directory with manifests/ and patches/ (repeatable; env HOTFIX_CATALOG, ':'-separated).",
)
dry_run_option = click.option("--dry-run", is_flag=True, help="Check and plan everything, change nothing, say what would change.")


def complete_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion of hotfix ids: the catalog's (with the --catalog options already typed)."""
    try:
        from vllm_hotfix.catalog.index import Catalog

        catalogs = tuple(Path(c) for c in ctx.params.get("catalogs") or ())
        return [i for i in Catalog.load(catalogs).ids() if i.startswith(incomplete)]
    except Exception:  # noqa: BLE001 - a broken catalog must not break the user's shell
        return []
