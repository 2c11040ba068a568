"""The commands of signed locks and catalogs (`hotfix sign`, `hotfix trust rotate`), added to cli.py's group.

Parse + dispatch only, as cli.py: each callback calls commands.<x>.run with explicit keywords.
"""

from __future__ import annotations

import click

from vllm_hotfix.cli_options import SIGN_HELP, TRUST_ROTATE_HELP, dry_run_option, json_option, sign_options, \
    trust_rotate_options


def _exit(code: int) -> None:
    raise SystemExit(code)


@click.command("sign", help=SIGN_HELP, short_help="Sign a lock, a trust policy or a catalog in minisign's format.")
@sign_options
@dry_run_option
@json_option
def sign_cmd(file, catalog, key, password_file, trusted_comment, dry_run, as_json) -> None:
    from vllm_hotfix.commands import sign as command

    _exit(command.run(file=file, catalog=catalog, key=key, password_file=password_file, trusted_comment=trusted_comment, dry_run=dry_run, as_json=as_json))


@click.group("trust", short_help="Trust policies: rotate to a newer one signed by the current keys.")
def trust_group() -> None:
    """Trust policies (HOTFIX_TRUST): who must have signed a lock or a catalog (README: Signed locks)."""


@trust_group.command("rotate", help=TRUST_ROTATE_HELP, short_help="Replace the policy by a newer one its keys signed.")
@trust_rotate_options
@dry_run_option
@json_option
def trust_rotate_cmd(new_policy, trust, chain, dry_run, as_json) -> None:
    from vllm_hotfix.commands import trust as command

    _exit(command.run(new_policy=new_policy, trust=trust, chain=chain, dry_run=dry_run, as_json=as_json))
