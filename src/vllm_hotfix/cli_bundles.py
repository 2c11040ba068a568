"""The commands of hotfix bundles (`hotfix pack`), added to cli.py's group.

Parse + dispatch only, as cli.py: each callback calls commands.<x>.run with explicit keywords.
"""

from __future__ import annotations

from pathlib import Path

import click

from vllm_hotfix.cli_options import catalog_option, complete_ids, dry_run_option, json_option, python_option

PACK_HELP = """Pack an export into a hotfix bundle: an OCI image layout (one layer: the patched files under
site-packages/ at their site-packages-relative paths, hotfix.lock and its signature files) that Kubernetes mounts as an
image volume pinned by digest, for fixes past the 1 MiB a ConfigMap holds.

The export is what `hotfix export --to DIR` wrote (--export-dir; every file is checked against the
lock's sha256 first, no symlink is followed), or IDs exported on the fly from --python. The image is
reproducible: the same export gives the same digest. It is a runnable image (a real config with
rootfs.diff_ids, as containerd requires for image volumes), one manifest per --platform under an
image index. Push it with skopeo; the command prints the line.

\b
Examples:
  hotfix pack --export-dir hotfix-export --to bundle --repository registry.example/team/vllm-hotfix
  hotfix pack mamba-align-block-size --python /opt/venv/bin/python --to bundle --platform linux/arm64
  skopeo inspect oci:bundle
"""


def pack_options(command):
    """The options of `hotfix pack` but the target's and the catalog's."""
    for option in reversed((
        click.option("--export-dir", type=click.Path(file_okay=False, path_type=Path), default=None, help="Directory written by `hotfix export` (default: hotfix-export; not with IDs)."),
        click.option("--to", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Directory for the OCI image layout (new, or a bundle packed before: replaced whole)."),
        click.option("--tag", help="The image's tag in the layout (default: the fingerprint, hf1-...)."),
        click.option("--platform", "platforms", multiple=True, metavar="OS/ARCH", help="Platform of the image config (repeatable; default: linux/amd64 and linux/arm64). containerd unpacks only an image of the node's platform."),
        click.option("--repository", metavar="REGISTRY/PATH", help="Where it will be pushed, to print the skopeo line and the pinned reference in full."),
    )):
        command = option(command)
    return command


def _exit(code: int) -> None:
    raise SystemExit(code)


@click.command("pack", help=PACK_HELP, short_help="Pack an export into an OCI image (a hotfix bundle) for a Kubernetes image volume.")
@click.argument("hotfix_ids", nargs=-1, metavar="[ID]...", shell_complete=complete_ids)
@pack_options
@python_option
@catalog_option
@dry_run_option
@json_option
def pack_cmd(hotfix_ids, export_dir, out_dir, tag, platforms, repository, python, catalogs, dry_run, as_json) -> None:
    from vllm_hotfix.commands import pack as command

    _exit(command.run(hotfix_ids=tuple(hotfix_ids), export_dir=export_dir, python=python, catalogs=tuple(catalogs), out_dir=out_dir, tag=tag, platforms=tuple(platforms), repository=repository, dry_run=dry_run, as_json=as_json))
