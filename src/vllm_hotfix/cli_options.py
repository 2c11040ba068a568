"""The options and help texts that several commands share (cli.py stays the list of commands)."""

from __future__ import annotations

import os
from pathlib import Path

import click

EXIT_CODES_HELP = """\b
Exit codes:
  0  success / everything in effect
  1  not in effect (verify, status) or not pristine, or a recorded fix not in effect (audit)
  2  usage error
  3  refused: baseline not clean, checksum mismatch, version out of range,
     unmet precondition, unsafe path
  4  patch does not apply (conflict)
  5  fixed upstream: the target already contains the fix
  6  write failed (read-only file system, disk full); all files restored
  7  busy: another hotfix process holds the target's lock
  8  invalid input: malformed diff, manifest or lock file
  9  doctor: no known issue matches the logs
  10 unavailable: a release could not be listed or downloaded (check-catalog, port,
     contains --versions, new)
  11 a trust policy (--trust, HOTFIX_TRUST) refuses: unsigned
  12 ... fewer valid signatures from listed keys than its threshold
  13 ... tampered: a listed key's signature does not verify on these bytes
  14 ... rollback: the lock's version is below min_version
  15 ... expired (past the policy's grace with expired = "warn")
  70 internal error (HOTFIX_DEBUG=1 shows the traceback)
  130/143 interrupted by SIGINT/SIGTERM; every file was restored
"""


DOCTOR_EXIT_HELP = """\b
Exit codes of doctor:
  0  a known issue matches, and its fix is already in effect (applied / fixed upstream)
  1  a known issue matches confidently and its fix is not in effect (any state but applied /
     fixed upstream: not applied, lost, stale, stale bytecode, drifted, interrupted, unknown)
  2  usage error (unreadable log, bad option)
  8  invalid manifest in the catalog
  9  no known issue matches (or only ones for other releases)
"""


DOCTOR_HELP = """Read crash logs (files, '-' for stdin, .gz too) and name the hotfix or advisory that fixes the crash.

Finds the root error of every process (vLLM's (EngineCore_DP0 pid=...) / (Worker_TP3 ...) prefixes,
CANN plog pids, one file = one process otherwise; its innermost exception first), matches the
catalog's [[signatures]] where each counts (a fault report, a traceback, the log's own error lines, a
config line; never a table or prose), and with --python / --root checks whether the fix is already
in effect on that target. Prints a ranked verdict with the evidence lines (file:line): confident
(apply), possible (a generic error and a condition of the bug: how to confirm it, then the
`hotfix apply ID --dry-run` to run), or no candidate (a generic error alone: who shares it).

\b
Examples:
  docker logs vllm 2>&1 | hotfix doctor - --python /opt/venv/bin/python
  hotfix doctor vllm.log.gz dmesg.txt --json
  hotfix doctor ~/ascend/log/debug/plog/*.log server.log --root /vllm-workspace/vllm-ascend

"""

NEW_HELP = """Author a hotfix: write patches/ID/*.patch and manifests/ID.toml with hashes and stats.

\b
Examples:
  hotfix new glm-conv-null-slot --from-commit f5826a4 --repo ./vllm-ascend \\
      --exclude 'release_notes/**' --add-patch zero-null-row.patch \\
      --target vllm-ascend --versions '==0.30.0rc2' --out ./my-catalog
  hotfix new my-fix --from-install vllm --python /opt/venv/bin/python --out ./my-catalog
  hotfix new vllm-0-25-1 --from-release vllm==0.25.1 --base 0.25.0 --out ./my-catalog [--split-by-file]
Then: hotfix show ID --catalog ./my-catalog; hotfix check-catalog ID --catalog ./my-catalog

"""

PORT_HELP = """Port a catalog hotfix to published releases where none of its patches applies.

Each release is judged like check-catalog (real wheels, cached): applies, fixed-upstream,
not-applicable, unavailable. Where no variant applies, the pristine files of the nearest release
where one does are merged three ways with the new release (`git merge-file`, then by words),
the result must pass the manifest's [[checks]], and becomes patches/ID/<release>.patch with its
versions range, md5, sha256 and stats. Exit 4 if a release conflicts (the hunk and both sides are
printed), 10 if a release could not be downloaded; then nothing is written. Needs git.

\b
Examples:
  hotfix port mamba-align-block-size --versions '>=0.26,<0.32' --out ./my-catalog --dry-run
  hotfix port my-fix --catalog ./my-catalog --out ./my-catalog     # update in place

"""

CONTAINS_HELP = """Is this fix in this install (or in each published release), decided from the files?

\b
Answers:
  contained       the files hold the fix's post-image (upstream merged it, or fixed_in says so)
  applied         recorded here by `hotfix apply` and in effect
  applicable      not there; the patch applies as it is
  partly          some files or hunks hold the post-image, the rest does not apply
  conflicts       nothing of it is there, and the patch does not apply
  not-applicable  outside the hotfix's targets
  stale-bytecode  recorded and in the files, but Python would load a __pycache__ entry holding other code
Exit: 0 contained/applied, 1 applicable/stale-bytecode, 3 not-applicable, 4 partly/conflicts; with --versions
0 when every release was answered, 10 when one could not be downloaded.

\b
Examples:
  hotfix contains mamba-align-block-size --python /opt/venv/bin/python
  hotfix contains --patch fix.diff --versions '>=0.29'
  hotfix contains --patch fix.diff --root /vllm-workspace/vllm

"""


SIGN_HELP = """Sign a lock, a trust policy or a catalog (--catalog DIR) with a minisign secret key.

Writes FILE.<KEYID>.minisig beside FILE (KEYID: the key id minisign prints, 16 hex digits), one
file per key, so several keys can sign one lock; `minisign -V -m FILE -x FILE.<KEYID>.minisig -p
KEY.pub` accepts it, and a signature `minisign -S` wrote (FILE.minisig, or -x FILE.<KEYID>.minisig)
counts the same. The signature is prehashed (BLAKE2b-512, as minisign's default) and its trusted
comment is signed too. FILE is never changed; re-sign after every `hotfix export`. A catalog gets
DIR/hotfix-catalog.sha256 (every file of manifests/ and patches/, as sha256sum writes it) and its
signature.

Keys come from `minisign -G` (encrypted with scrypt) or `minisign -G -W` (unencrypted). The
password of an encrypted key: --password-file FILE or HOTFIX_KEY_PASSWORD_FILE (its first line;
a mounted secret in CI), else HOTFIX_KEY_PASSWORD, else a prompt on the terminal; never an argument.

\b
Examples:
  minisign -G -p release.pub -s release.key
  hotfix sign hotfix-export/hotfix.lock --key release.key
  HOTFIX_KEY_PASSWORD_FILE=/run/secrets/sre-key-pw hotfix sign hotfix-export/hotfix.lock --key sre.key
  hotfix sign --catalog ./my-catalog --key release.key
  hotfix verify --lock hotfix-export/hotfix.lock --trust trust.toml
"""

TRUST_ROTATE_HELP = """Replace the trust policy (--trust) by NEW, a higher version signed by the policy's keys.

NEW must carry a higher `version`, and signatures (NEW.<KEYID>.minisig, `hotfix sign NEW --key
...`) by `threshold` keys of the current policy and by `threshold` of its own. Then it replaces
the current file (atomically, with its signatures), and the old keys stop counting. --chain DIR
also writes DIR/policy-<version>.toml: containers whose image pins an older policy walk that
chain with HOTFIX_TRUST_CHAIN=DIR, each step checked against the one before. Exit 11-14 names
what is missing (README: Exit codes); nothing is written then.

\b
Examples:
  hotfix sign trust-v2.toml --key release.key; hotfix sign trust-v2.toml --key sre.key
  hotfix trust rotate trust-v2.toml --trust /etc/vllm-hotfix/trust.toml --dry-run
  hotfix trust rotate trust-v2.toml --trust ./trust.toml --chain ./trust-chain
"""

GC_HELP = """Remove recorded state, journals and backups kept for targets (venvs, checkouts) that are gone.

A missing target may only be away for a while (a checkout moved, a volume not mounted): its
state, the only way back to the original files, is kept until the target has been missing for
--older-than (counted from the first `hotfix gc` that found it missing), or until --confirm PATH
says it is gone for good. A target that exists is never touched. --dry-run lists what would be
removed and what is kept, and why, and writes nothing.
"""

K8S_HELP = """Write a kustomize overlay: ConfigMaps with the exported files and hotfix.lock, read-only subPath
mounts over site-packages in the named containers, and the guard's environment.

A workload or container the base does not have is refused (exit 3), naming what it has. With
kubectl (or kustomize) on PATH, the overlay is rendered before it replaces --to, and a render in
which a named container lacks a mount or the guard's variables is refused with nothing written.

With --bundle REF@sha256:DIGEST the files come from a hotfix bundle (`hotfix pack`) mounted as an
image volume pinned by that digest (a tag is refused, exit 2): one read-only subPath mount per file,
listed by --bundle-dir (the layout, whose digest must be REF's) or --export-dir. Image volumes need
Kubernetes >= 1.33 (beta; on by default from 1.35) and containerd 2.1+ or CRI-O; otherwise bake.

With --admission it writes instead a ValidatingAdmissionPolicy (CEL, no webhook), its binding to the
--namespace(s), and a ConfigMap of the approved pairs (image digest -> fingerprints) from each
--approve: a bundle `hotfix pack` wrote (checked blob by blob, file by file against its lock), or an
image digest and the lock it runs with. A pod there is admitted only when every image and image
volume is pinned by digest and its vllm-hotfix.io/fingerprint annotation is approved for its images.
With --trust POLICY every lock approved must pass that policy, as `verify --lock` judges it.

\b
Examples:
  hotfix k8s --export-dir hotfix-export --base k8s/base --to k8s/hotfix --workload deployment/vllm --container vllm
  hotfix k8s --bundle "registry.example/team/vllm-hotfix@sha256:$DIGEST" --bundle-dir bundle \\
      --base k8s/base --to k8s/hotfix --workload deployment/vllm --container vllm
  hotfix k8s --admission --approve bundle --namespace inference --to k8s/admission --trust trust.toml
  hotfix k8s --admission --namespace inference --to k8s/admission \\
      --approve "registry.example/vllm-openai@sha256:$DIGEST=hotfix-export/hotfix.lock"
"""


WHERE_HELP = """Show which files `import PACKAGE` really loads, from what install, and any shadowing.

Asks the interpreter that runs vLLM (--python, a venv directory works too), not the one running
hotfix. Kinds: wheel, editable, git, directory. Warns about PYTHONPATH / .pth overlays and
duplicate copies on sys.path, and names the files that come through a bind mount.

\b
Examples:
  hotfix where vllm --python /opt/venv/bin/python --import
  hotfix where vllm_ascend --json
"""

AUDIT_HELP = """Check every installed file of PACKAGE against pip's RECORD (exit 1 if not pristine).

Prints only differences, `rpm -V` style: `S.5......` size, `..5......` digest, `missing`,
`unrecorded` (a file in the package directory RECORD does not list; __pycache__/*.pyc ignored),
`stale-bytecode` (a __pycache__ entry Python would load instead of a changed or recorded source,
holding other code); then the hotfixes recorded for the install with their state (exit 1 when one is
not in effect, even on a pristine install: a rebuild or an upgrade under the record).

\b
Examples:
  hotfix audit vllm --python /opt/venv/bin/python
  hotfix audit vllm --json | jq .differences
"""

LOG_HELP = """Show who applied, upgraded, adopted or rolled back which hotfix on a target, and when.

Each change is one line of the target's history.jsonl in the state directory, written by the
same all-or-nothing transaction as the files and the record: time, user (and SUDO_USER), host,
the command line, the outcome, the hotfix and version, and the fingerprint of the series after
it. Exit 8 names a broken history file or line.

\b
Examples:
  hotfix log --python /opt/venv/bin/python
  hotfix log mamba-align-block-size --all --json
"""


def all_targets_option(text: str):
    return click.option("--all", "all_targets", is_flag=True, help=text)


OVERLAY_PARAMS = ("export_dir", "base", "workload", "kind", "name", "containers", "container_site_packages", "strict",
                  "max_configmaps", "bundle", "bundle_dir")
ADMISSION_PARAMS = ("approve", "namespaces", "params_namespace", "warn_only", "trust")


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
    from vllm_hotfix.settings import CONTAINER_LOCK

    for option in reversed((
        click.option("--print-env", is_flag=True, help="Print the environment lines that turn on the in-process guard."),
        click.option("--check-env", is_flag=True, help="Exit 1 if this environment (VLLM_PLUGINS) or the interpreter that "
                     "runs vLLM (its entry points, read there) keeps vLLM from loading the guard."),
        click.option("--lock", "lock_file", help="Lock file path inside the container.", default=CONTAINER_LOCK,
                     show_default=True),
        click.option("--require", "require", help="Comma-separated hotfix ids to require instead of a lock file."),
        click.option("--strict/--no-strict", default=True, show_default=True,
                     help="Stop a vLLM process whose hotfix is not in effect."),
        click.option("--format", "fmt", type=click.Choice(["compose", "k8s", "shell"]), default="compose",
                     show_default=True),
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
lock_fields_options = _stack(
    click.option("--lock-version", type=click.IntRange(min=1),
                 help="The lock's version (a trust policy's min_version; default: the lock in --to's + 1, else 1)."),
    click.option("--expires", metavar="WHEN", help="When a trust policy stops accepting the lock: a duration (30d, 12h) "
                                                   "or a UTC time (2027-01-31T00:00:00Z)."),
)


runtime_options = _stack(  # `hotfix status --runtime [--lock FILE]`
    click.option("--runtime", is_flag=True, help="Load vLLM's plugins and the platform's patches in the interpreter "
                 "that runs vLLM (this environment's VLLM_PLUGINS) and list every vLLM function they rebind, naming "
                 "those that touch a hotfix (exit 1 if any does)."),
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
