"""`hotfix catalog ...`: the catalog as a feed (publish, add, update, list, remove, watch), added to cli.py's
group, with its --help texts (cli_help.py's form: text, one-line summary, a tested Examples block).

Parse + dispatch only, as cli.py: each callback calls a commands module with explicit keywords.
"""

from __future__ import annotations

from pathlib import Path

import click

from vllm_hotfix.cli_help import examples, texts as help_texts
from vllm_hotfix.cli_options import catalog_option, complete_ids, dry_run_option, json_option

POLICY = click.Path(dir_okay=False, path_type=Path)

TEXTS = {
    "catalog": ("""Publish a catalog as signed releases, subscribe hosts to it, keep them fresh (docs/feed.md).

A subscribed catalog is seen by every command as a --catalog directory is, while its release has
not expired; past that it is stale (not used, a note says so) until `hotfix catalog update`.""",
                "Publish, subscribe to and update signed catalog releases.", examples(
        "hotfix catalog publish ./my-catalog --to ./release --key release.key --key sre.key",
        "hotfix catalog add team https://catalogs.example/team/ --trust team-trust.toml",
        "hotfix catalog update")),
    "catalog publish": ("""Write a release of the catalog DIR (manifests/ + patches/) into OUT, signed by each --key.

OUT gets release.json (every file's sha256 and size, the archive's, a version and an expiry),
a signature per key in minisign's format (the first key's release.json.minisig: `minisign -V -m
OUT/release.json -p KEY.pub` checks it as pasted; a further key's release.json.<KEYID>.minisig, with -x) and catalog-<sha256>.tar.gz (sorted, mtime 0, owner 0: the same catalog, version, expiry
and keys give the same bytes). The version only grows: by default the previous release's in OUT plus 1
(a lower or equal --version is refused, exit 3). --expires bounds how long subscribers use it: publish
again before then (a CI schedule), or hosts see the catalog as stale. OUT is replaced whole.""",
                        "Write a signed, reproducible catalog release for subscribers.", examples(
        "hotfix catalog publish ./my-catalog --to ./release --key release.key --key sre.key",
        "hotfix catalog publish ./my-catalog --to ./release --key release.key --expires 7d --dry-run",
        "hotfix catalog publish ./my-catalog --to ./release --key release.key --oci ./release-oci",
        "HOTFIX_KEY_PASSWORD_FILE=/run/secrets/pw hotfix catalog publish ./my-catalog --to ./release \\",
        "    --key release.key --version 12 --expires 2027-01-31T00:00:00Z")),
    "catalog add": ("""Subscribe to the catalog released at URL (https://, file:// or oci:/LAYOUT[:TAG]) under NAME.

The first release is fetched and checked as `update` checks one (signatures by the policy's threshold
of distinct keys, expiry, every file's sha256) before anything is recorded. HTTPS uses the system's
CA bundle, REQUESTS_CA_BUNDLE, or --ca FILE (kept for later updates).""",
                    "Subscribe to a published catalog (fetched and checked now).", examples(
        "hotfix catalog add team https://catalogs.example/team/ --trust team-trust.toml",
        "hotfix catalog add team https://10.0.0.5:8443/catalog/ --trust trust.toml --ca ./ca.pem",
        "hotfix catalog add local file:///srv/catalog-release/ --trust trust.toml",
        "hotfix catalog add mirrored oci:/srv/release-oci:latest --trust trust.toml")),
    "catalog update": ("""Fetch each subscribed catalog's newest release and use it if the policy accepts it.

Refused, each with its exit code and the cached copy byte-identical: unsigned (11), fewer valid
signatures from distinct listed keys than the threshold (12), a signature, the archive or a file not
what was signed (13), a version below the cached one or the same version with other contents: a
replayed release (14), an expired release: a frozen feed (15), malformed (8), unreachable (10).""",
                       "Fetch, check and swap in each subscribed catalog's newest release.", examples(
        "hotfix catalog update",
        "hotfix catalog update team --json",
        "REQUESTS_CA_BUNDLE=/etc/ssl/team-ca.pem hotfix catalog update team")),
    "catalog list": ("List the subscribed catalogs: URL, cached release, expiry, stale or not.",
                     "List the subscribed catalogs and their cached releases.", examples(
        "hotfix catalog list",
        "hotfix catalog list --json")),
    "catalog remove": ("Forget a subscribed catalog and its cached release.",
                       "Forget a subscribed catalog.", examples(
        "hotfix catalog remove team --dry-run",
        "hotfix catalog remove team")),
    "catalog watch": ("""Check every hotfix against the releases published after the range its manifest records.

For each hotfix and new release (vLLM's, vllm-ascend's, from the index; real wheels, cached):
fixed-upstream (at a declared fixed_in: retire it; by content: declare fixed_in), still-applies (the
newest patch applies unchanged: extend the range), ported (`port` could merge a variant: run it) or
conflicts (port's result shown). --write edits the manifests in place and prints the diff for review.
Exit 0 nothing to do, 1 a proposal not written, 4 a conflict, 10 a release unavailable: what a
scheduled CI job runs.""",
                      "Check hotfixes against newly published releases; propose or write range changes.", examples(
        "hotfix catalog watch",
        "hotfix catalog watch mamba-align-block-size --json",
        "hotfix catalog watch --catalog ./my-catalog --write")),
}


def texts(name: str) -> dict:
    return help_texts(name, TEXTS)


def _exit(code: int) -> None:
    raise SystemExit(code)


@click.group("catalog", **texts("catalog"))
def catalog_group() -> None:
    pass


@catalog_group.command("publish", **texts("catalog publish"))
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path), metavar="DIR")
@click.option("--to", "out_dir", required=True, metavar="OUT", type=click.Path(file_okay=False, path_type=Path), help="Directory for the release (new, or a release published before: replaced whole).")
@click.option("--key", "keys", multiple=True, required=True, type=click.Path(dir_okay=False, path_type=Path), help="A minisign secret key (`minisign -G`) to sign release.json with (repeatable: one signature per key).")
@click.option("--password-file", type=click.Path(dir_okay=False, path_type=Path), help="File whose first line is the keys' password (env HOTFIX_KEY_PASSWORD_FILE; or HOTFIX_KEY_PASSWORD).")
@click.option("--version", "version", type=click.IntRange(1, 10 ** 15 - 1), help="The release's version (default: the previous release's in --to plus 1; must be higher).")
@click.option("--expires", metavar="TIME|DURATION", help="When subscribers stop using it: YYYY-MM-DDTHH:MM:SSZ or a duration from now (default 30d).")
@click.option("--oci", "oci_dir", type=click.Path(file_okay=False, path_type=Path), metavar="LAYOUT", help="Also write the release as an OCI artifact in this image layout (push it with skopeo or oras; subscribe with oci:LAYOUT).")
@dry_run_option
@json_option
def publish_cmd(directory, out_dir, keys, password_file, version, expires, oci_dir, dry_run, as_json) -> None:
    from vllm_hotfix.commands import catalog_publish as command

    _exit(command.run(directory=directory, out_dir=out_dir, keys=tuple(keys), password_file=password_file, version=version, expires=expires, oci_dir=oci_dir, dry_run=dry_run, as_json=as_json))


@catalog_group.command("add", **texts("catalog add"))
@click.argument("name")
@click.argument("url")
@click.option("--trust", required=True, type=POLICY, metavar="POLICY", help="The trust policy (docs/trust.md) its releases must satisfy: keys, threshold, min_version; read at every update.")
@click.option("--ca", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE", help="CA bundle (PEM) for the HTTPS server's certificate (default: REQUESTS_CA_BUNDLE, else the system's).")
@dry_run_option
@json_option
def add_cmd(name, url, trust, ca, dry_run, as_json) -> None:
    from vllm_hotfix.commands import catalog_feed as command

    _exit(command.add(name=name, url=url, trust=trust, ca=ca, dry_run=dry_run, as_json=as_json))


@catalog_group.command("update", **texts("catalog update"))
@click.argument("names", nargs=-1, metavar="[NAME]...")
@dry_run_option
@json_option
def update_cmd(names, dry_run, as_json) -> None:
    from vllm_hotfix.commands import catalog_feed as command

    _exit(command.update(names=tuple(names), dry_run=dry_run, as_json=as_json))


@catalog_group.command("list", **texts("catalog list"))
@json_option
def list_cmd(as_json) -> None:
    from vllm_hotfix.commands import catalog_feed as command

    _exit(command.listing(as_json=as_json))


@catalog_group.command("remove", **texts("catalog remove"))
@click.argument("name")
@dry_run_option
@json_option
def remove_cmd(name, dry_run, as_json) -> None:
    from vllm_hotfix.commands import catalog_feed as command

    _exit(command.remove(name=name, dry_run=dry_run, as_json=as_json))


@catalog_group.command("watch", **texts("catalog watch"))
@click.argument("hotfix_ids", nargs=-1, metavar="[ID]...", shell_complete=complete_ids)
@click.option("--since", metavar="VERSION", help="Only releases above VERSION (default: above each hotfix's range).")
@click.option("--write", is_flag=True, help="Edit the manifests in place (fixed_in, ranges) and print the diff.")
@catalog_option
@json_option
def watch_cmd(hotfix_ids, since, write, catalogs, as_json) -> None:
    from vllm_hotfix.commands import catalog_watch as command

    _exit(command.run(hotfix_ids=tuple(hotfix_ids), since=since, catalogs=tuple(catalogs), write=write, as_json=as_json))
