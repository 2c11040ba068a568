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

Finds the first error of every process (vLLM's (EngineCore_DP0 pid=...) / (Worker_TP3 ...) prefixes,
CANN plog pids, one file = one process otherwise), matches the catalog's [[signatures]], and with
--python / --root checks whether the fix is already in effect on that target. Prints a ranked
verdict with the evidence lines (file:line), the confidence and the command to run next.

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


def catalog_option(command):
    """--catalog DIR (repeatable) and --allow-shadow, on every command that reads the catalog."""
    return _catalog_dirs(_allow_shadow_flag(command))
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


dry_run_option = click.option("--dry-run", is_flag=True, help="Check and plan everything, change nothing, say what would change.")


def complete_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion of hotfix ids: the catalog's (with the --catalog options already typed)."""
    try:
        from vllm_hotfix.catalog.index import Catalog

        catalogs = tuple(Path(c) for c in ctx.params.get("catalogs") or ())
        return [i for i in Catalog.load(catalogs).ids() if i.startswith(incomplete)]
    except Exception:  # noqa: BLE001 - a broken catalog must not break the user's shell
        return []
