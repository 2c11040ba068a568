"""The commands of hotfix bundles (`hotfix pack`), added to cli.py's group.

Parse + dispatch only, as cli.py: each callback calls commands.<x>.run with explicit keywords.
"""

from __future__ import annotations

import click

from vllm_hotfix.cli_help import texts
from vllm_hotfix.cli_options import catalog_option, complete_ids, dry_run_option, json_option, pack_options, python_option


def _exit(code: int) -> None:
    raise SystemExit(code)


@click.command("pack", **texts("pack"))
@click.argument("hotfix_ids", nargs=-1, metavar="[ID]...", shell_complete=complete_ids)
@pack_options
@python_option
@catalog_option
@dry_run_option
@json_option
def pack_cmd(hotfix_ids, export_dir, out_dir, tag, platforms, repository, python, catalogs, dry_run, as_json) -> None:
    from vllm_hotfix.commands import pack as command

    _exit(command.run(hotfix_ids=tuple(hotfix_ids), export_dir=export_dir, python=python, catalogs=tuple(catalogs), out_dir=out_dir, tag=tag, platforms=tuple(platforms), repository=repository, dry_run=dry_run, as_json=as_json))
