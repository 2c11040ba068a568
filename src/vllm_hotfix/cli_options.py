"""The options that several commands share (cli.py stays the list of commands; cli_help.py has the texts)."""

from __future__ import annotations

import os
from pathlib import Path

import click

def all_targets_option(text: str):
    return click.option("--all", "all_targets", is_flag=True, help=text)


OVERLAY_PARAMS = ("export_dir", "base", "workload", "kind", "name", "containers", "container_site_packages", "strict",
                  "max_configmaps", "readiness", "bundle", "bundle_dir", "trust_configmap", "with_guard")
ADMISSION_PARAMS = ("approve", "namespaces", "params_namespace", "warn_only", "trust")
readiness_option = click.option("--readiness/--no-readiness", default=True, show_default=True, help="Add `python3 -I -m vllm_hotfix_guard ready` as the readiness check (docs/readiness.md), a memory-backed directory for the guard's records and HOTFIX_READY_DIR.")


def compose_edit_options(command):  # `hotfix compose`'s --remove, --readiness/--no-readiness, --guard/--no-guard, --strict/--no-strict
    guard = click.option("--guard/--no-guard", "with_guard", default=True, show_default=True, help="The export must carry the guard, mounted with the files; --no-guard accepts one without it, for an image that has vllm-hotfix-guard installed itself (with --no-strict). --remove needs no guard.")
    strict = click.option("--strict/--no-strict", default=True, show_default=True, help="Write HOTFIX_STRICT=1 beside HOTFIX_LOCK: the guard stops a vLLM process whose hotfix is not in effect; --no-strict writes none (the guard only logs, unless the image or the service sets it). A HOTFIX_STRICT the service already sets must agree. --remove takes out the one it wrote.")
    return click.option("--remove", is_flag=True, help="Take exactly these mounts out again.")(readiness_option(guard(strict(command))))


def k8s_overlay_options(command):
    """--to, and the options of `hotfix k8s` that shape the overlay (OVERLAY_PARAMS)."""
    for option in reversed((
        click.option("--to", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Directory for the overlay (kustomization.yaml, patch, files), or for the --admission policy."),
        click.option("--export-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("hotfix-export"), show_default=True, help="Directory written by `hotfix export`."),
        click.option("--base", type=click.Path(exists=True, path_type=Path), help="The workload's manifest file (e.g. `helm template` output) or kustomization directory; only read.  [required without --admission]"),
        click.option("--workload", help="KIND/NAME, e.g. deployment/vllm, statefulset/vllm, leaderworkerset/vllm."),
        click.option("--kind", help="Workload kind (instead of --workload)."),
        click.option("--name", help="Workload name (instead of --workload)."),
        click.option("--container", "containers", multiple=True, help="Container to mount the files into (repeatable).  [required without --admission]"),
        click.option("--container-site-packages", help="site-packages path inside the container (default: from the lock)."),
        click.option("--strict/--no-strict", default=True, show_default=True, help="HOTFIX_STRICT for the guard: stop a process whose hotfix is not in effect."),
        click.option("--max-configmaps", type=click.IntRange(1, 64), default=8, show_default=True, help="Refuse (use --bundle or `hotfix bake`) when the files need more ConfigMaps than this."),
        click.option("--bundle", metavar="REF@sha256:DIGEST", help="Mount the hotfix bundle `hotfix pack` made, pushed to REF, as an image volume pinned by this digest (no tag) instead of ConfigMaps. Kubernetes >= 1.33, containerd 2.1+ or CRI-O."),
        click.option("--bundle-dir", type=click.Path(file_okay=False, path_type=Path), help="With --bundle: the layout `hotfix pack` wrote, to list the files to mount (checked: its digest must be REF's); else they come from --export-dir."),
        readiness_option,
        click.option("--guard/--no-guard", "with_guard", default=True, show_default=True, help="The export or bundle must carry the guard, mounted with the files; --no-guard accepts one without it, for an image that has vllm-hotfix-guard installed itself (with --no-strict)."),
        click.option("--trust-configmap", metavar="NAME", help="Mount the trust policy (key trust.toml) from this existing ConfigMap, not the lock's, at /etc/vllm-hotfix-trust/ and set HOTFIX_TRUST (docs/trust-guard.md)."),
    )):
        command = option(command)
    return command


def admission_options(command):
    """The options of `hotfix k8s --admission` (--admission and ADMISSION_PARAMS)."""
    for option in reversed((
        click.option("--admission", is_flag=True, help="Write a ValidatingAdmissionPolicy, its binding and the ConfigMap of approved image digests and fingerprints instead of an overlay."),
        click.option("--approve", "approve", multiple=True, metavar="BUNDLE_DIR|IMAGE@sha256:DIGEST=LOCK", help="With --admission: a bundle `hotfix pack` wrote, or an image and the lock it runs with (repeatable)."),
        click.option("--namespace", "namespaces", multiple=True, metavar="NS", help="With --admission: a namespace whose pods the policy judges (repeatable)."),
        click.option("--params-namespace", default="vllm-hotfix-admission", show_default=True, metavar="NS", help="With --admission: the namespace of the approved-images ConfigMap (one the workloads' owners cannot write)."),
        click.option("--warn-only", is_flag=True, help="With --admission: warn and audit instead of denying (to roll the policy out)."),
        click.option("--trust", type=click.Path(dir_okay=False, path_type=Path), metavar="POLICY", help="With --admission: approve only locks this trust policy accepts (as `verify --lock` judges them; default: HOTFIX_TRUST); a refused one stops the run, exit 11-15."),
    )):
        command = option(command)
    return command


def given_options(names) -> tuple[str, ...]:
    """The options of the running command among ``names`` (parameter names) given on the command line
    or by their environment variable, as the user spells them (``--base``): options of another mode."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    found = []
    for param in ctx.command.params:
        if param.name in names and ctx.get_parameter_source(param.name) in (ParameterSource.COMMANDLINE,
                                                                             ParameterSource.ENVIRONMENT):
            found.append(max(param.opts, key=len))
    return tuple(found)


tags_repo_option = click.option(
    "--repo", "repo", type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Read each release from its tag (v0.23.0) in this local git clone instead of the index's wheel or sdist.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
to_version_option = click.option(  # `hotfix rollback ID --to-version V`
    "--to-version", "to_version", metavar="V", help="Instead of taking the hotfix out, go back to version V of "
    "the catalog (the version an upgrade replaced): the recorded version reversed and V applied, in one transaction.")
python_option = click.option(
    "--python",
    "python",
    envvar="HOTFIX_PYTHON",
    metavar="PY",
    help="Interpreter whose installed package is the target (env HOTFIX_PYTHON; default: this one, "
    "else the one behind the `vllm` command on PATH).",
)
def root_option(purpose: str):
    """--root DIR, its help saying what the command does with that checkout (``"to patch"``, ``"to inspect"``)."""
    return click.option(
        "--root",
        type=click.Path(file_okay=False, path_type=Path),
        help=f"The source checkout {purpose} (e.g. /vllm-workspace/vllm-ascend) instead of the package the "
             "interpreter (--python) has installed.",
    )
_catalog_dirs = click.option(
    "--catalog",
    "catalogs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Extra catalog directory with manifests/ and patches/ (repeatable; env HOTFIX_CATALOG, ':'-separated).",
)


def _allow_shadow(ctx, param, value) -> None:
    if value:  # read where the catalog is loaded (catalog.index.SHADOW_ENV), by every command alike
        os.environ["HOTFIX_ALLOW_SHADOW"] = "1"


_allow_shadow_flag = click.option(
    "--allow-shadow", is_flag=True, expose_value=False, callback=_allow_shadow,
    help="Let a user catalog redefine a built-in hotfix id (env HOTFIX_ALLOW_SHADOW=1); refused otherwise.",
)


def _trust(ctx, param, value) -> None:
    if value:  # read where a policy applies (txn.signed.policy_path), by every command alike
        os.environ["HOTFIX_TRUST"] = str(value)


trust_flag = click.option(
    "--trust", type=click.Path(dir_okay=False, path_type=Path), expose_value=False, callback=_trust, is_eager=True,
    metavar="FILE", help="Trust policy (TOML) that locks and, with catalogs = \"signed\", user catalogs must satisfy "
                         "(env HOTFIX_TRUST; in an image /etc/vllm-hotfix/trust.toml).")


def catalog_option(command):
    """--catalog DIR (repeatable), --allow-shadow and --trust, on every command that reads the catalog."""
    return _catalog_dirs(_allow_shadow_flag(trust_flag(command)))


def guard_options(command):
    """The options of `hotfix guard` (--print-env and its settings, --check-env)."""
    from vllm_hotfix_guard.settings import CONTAINER_LOCK

    for option in reversed((
        click.option("--print-env", is_flag=True, help="Print the environment lines that turn on the in-process guard."),
        click.option("--check-env", is_flag=True, help="Exit 1 if this environment (VLLM_PLUGINS) or the interpreter that "
                     "runs vLLM (its entry points, read there) keeps vLLM from loading the guard."),
        click.option("--build-dist", "build_dist", metavar="DIR", type=click.Path(file_okay=False, path_type=Path),
                     help="Write the guard's own distribution (vllm-hotfix-guard, stdlib only) into DIR: its wheel and "
                          "its site-packages tree."),
        click.option("--lock", "lock_file", help="Lock file path inside the container.", default=CONTAINER_LOCK,
                     show_default=True),
        click.option("--require", "require", help="Comma-separated hotfix ids to require instead of a lock file."),
        click.option("--strict/--no-strict", default=True, show_default=True,
                     help="Stop a vLLM process whose hotfix is not in effect."),
        click.option("--format", "fmt", type=click.Choice(["compose", "k8s", "shell"]), default="compose",
                     show_default=True, help="Write the lines as a compose `environment:` block, a Kubernetes "
                     "`env:` list or shell `export` lines."),
    )):
        command = option(command)
    return command


def _stack(*options):
    def apply(command):
        for option in reversed(options):
            command = option(command)
        return command
    return apply


sign_options = _stack(
    click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path), metavar="[FILE]"),
    click.option("--catalog", "catalog", type=click.Path(file_okay=False, path_type=Path),
                 help="Sign this catalog directory instead of a FILE."),
    click.option("--key", required=True, type=click.Path(dir_okay=False, path_type=Path),
                 help="The minisign secret key (`minisign -G`)."),
    click.option("--password-file", type=click.Path(dir_okay=False, path_type=Path),
                 help="File whose first line is the key's password (env HOTFIX_KEY_PASSWORD_FILE)."),
    click.option("--trusted-comment", help="The signed comment (default, as minisign: "
                                           "timestamp:T<TAB>file:NAME<TAB>hashed)."),
)
trust_rotate_options = _stack(
    click.argument("new_policy", type=click.Path(dir_okay=False, path_type=Path), metavar="NEW"),
    click.option("--trust", type=click.Path(dir_okay=False, path_type=Path), envvar="HOTFIX_TRUST", metavar="FILE",
                 help="The current policy (env HOTFIX_TRUST)."),
    click.option("--chain", type=click.Path(file_okay=False, path_type=Path),
                 help="Also write NEW as DIR/policy-<version>.toml, for HOTFIX_TRUST_CHAIN."),
)
lock_fields_options = _stack(  # `hotfix export`'s: the lock's fields, and the guard written beside it
    click.option("--lock-version", type=click.IntRange(min=1),
                 help="The lock's version (a trust policy's min_version; default: the lock in --to's + 1, else 1)."),
    click.option("--expires", metavar="WHEN", help="When a trust policy stops accepting the lock: a duration (30d, 12h) "
                                                   "or a UTC time (2027-01-31T00:00:00Z)."),
    click.option("--guard/--no-guard", "with_guard", default=True, show_default=True,
                 help="Also write the guard (EXPORT/guard: its site-packages tree to mount, its wheel to install)."),
)


runtime_options = _stack(  # `hotfix status --runtime [--lock FILE]`
    click.option("--runtime", is_flag=True, help="Load vLLM's plugins and the platform's patches in the interpreter "
                 "that runs vLLM (this environment's VLLM_PLUGINS), list every vLLM function they rebind, naming "
                 "those that touch a hotfix, and give the guard's verdicts there after them (stale bytecode, stale "
                 "aliases; exit 1 if a rebinding touches a hotfix or one is not in effect)."),
    click.option("--lock", "lock_file", type=click.Path(dir_okay=False, path_type=Path),
                 help="With --runtime: the fixed names of this lock (written by `hotfix export`), not the record's."),
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
