"""The commands of signed locks and catalogs (`hotfix sign`, `hotfix trust rotate`), added to cli.py's group.

Parse + dispatch only, as cli.py: each callback calls commands.<x>.run with explicit keywords.
"""

from __future__ import annotations

import click

from vllm_hotfix.cli_help import texts
from vllm_hotfix.cli_options import dry_run_option, json_option, sign_options, trust_rotate_options


def _exit(code: int) -> None:
    raise SystemExit(code)


@click.command("sign", **texts("sign"))
@sign_options
@dry_run_option
@json_option
def sign_cmd(file, catalog, key, password_file, trusted_comment, dry_run, as_json) -> None:
    from vllm_hotfix.commands import sign as command

    _exit(command.run(file=file, catalog=catalog, key=key, password_file=password_file, trusted_comment=trusted_comment, dry_run=dry_run, as_json=as_json))


@click.group("trust", **texts("trust"))
def trust_group() -> None:
    pass


@trust_group.command("rotate", **texts("trust rotate"))
@trust_rotate_options
@dry_run_option
@json_option
def trust_rotate_cmd(new_policy, trust, chain, dry_run, as_json) -> None:
    from vllm_hotfix.commands import trust as command

    _exit(command.run(new_policy=new_policy, trust=trust, chain=chain, dry_run=dry_run, as_json=as_json))
