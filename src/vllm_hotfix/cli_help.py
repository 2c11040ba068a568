"""What `hotfix COMMAND --help` says: each command's text, its one-line summary and its Examples block.

Every command has an Examples block in its epilog (``\\b`` keeps click from rewrapping it); each example
line is a command that runs as pasted, and tests/test_help.py parses every ``hotfix ...`` one with the
command's own parser, so none can name an option that is gone. cli.py passes ``texts(NAME)`` to its
decorator.
"""

from __future__ import annotations

from vllm_hotfix_guard.core.verdict import IN_EFFECT, STATES


def examples(*lines: str) -> str:
    """An Examples block for an epilog: one command a line (a line ending in `` \\`` goes on)."""
    return "\b\nExamples:\n" + "".join(f"  {line}\n" for line in lines)


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

GROUP_HELP = """Apply, verify and roll back vLLM / vllm-ascend hotfixes: all-or-nothing, provable, reversible.

\b
Examples (a session inside a production container):
  hotfix where vllm --import          # which files does `import vllm` really load?
  hotfix list                         # hotfixes in the catalog
  hotfix apply mamba-align-block-size --dry-run
  hotfix apply mamba-align-block-size
  hotfix verify                       # exit 0 only if every recorded fix is in effect
  hotfix rollback mamba-align-block-size
"""

DOCTOR_EXIT_HELP = """\b
Exit codes of doctor:
  0  a known issue matches, and its fix is already in effect (applied / fixed upstream)
  1  a known issue matches confidently and its fix is not in effect (any state but applied /
     fixed upstream: not applied, lost, stale, stale bytecode, drifted, interrupted, unknown)
  2  usage error (unreadable log, bad option)
  8  invalid input: a manifest in the catalog, a truncated .gz log, over 16 GiB from a stream
  9  no known issue matches (or only ones for other releases)
"""

PY = "--python /opt/venv/bin/python"
ASCEND = "--root /vllm-workspace/vllm-ascend"

# name -> (text, short help or None, epilog); every epilog starts with its Examples block
TEXTS: dict[str, tuple[str, str | None, str]] = {
    "apply": ("""Apply a catalog hotfix (ID) or a raw diff (--patch), all-or-nothing.

Several IDs apply a series in one transaction, in the order given: every one is applied and
recorded, or the files and the record stay as they were (a failed check, Ctrl-C, kill -9 and
`hotfix recover`). Every ID is checked before anything is written; one named twice is exit 2;
one already applied is reported as `apply ID` would, the others go on top. --json: a list.""",
              "Apply catalog hotfixes (ID...) or a raw diff (--patch), all-or-nothing.", examples(
        f"hotfix apply mamba-align-block-size {PY} --dry-run",
        f"hotfix apply mamba-align-block-size {PY}",
        f"hotfix apply va023-memcache-lazy-init va023-mtp-draft-slots {ASCEND}",
        f"hotfix apply glm-conv-null-slot {ASCEND}",
        f"hotfix apply my-fix --catalog ./my-catalog {PY}",
        "hotfix apply --patch fix.diff --root ./vllm --dry-run",
        f"hotfix apply --patch fix.diff {PY} --package vllm --id my-fix")),
    "status": ("Show, for each hotfix, whether it is applied, decided from the files themselves.\n\n"
               f"States: {', '.join(STATES)}. In effect (exit 0): {' and '.join(s for s in STATES if s in IN_EFFECT)}.\n\n"
               "With no ID: every hotfix recorded for the target, in series order, then the catalog's others "
               "for its packages. --all: every target the state directory records.", None, examples(
        f"hotfix status {PY}",
        f"hotfix status mamba-align-block-size {PY} --json",
        f"hotfix status {ASCEND}",
        "hotfix status --all",
        f"hotfix status --runtime {PY} --lock hotfix-export/hotfix.lock",
        f"hotfix status {PY} --vex > vllm.openvex.json")),
    "log": ("""Show who applied, upgraded, adopted or rolled back which hotfix on a target, and when.

Each change is one line of the target's history.jsonl in the state directory, written by the
same all-or-nothing transaction as the files and the record: time, user (and SUDO_USER), host,
the command line (its paths made absolute), the outcome, the hotfix and version, and the
fingerprint of the series after it. Exit 8 names a broken history file or line.""",
            "Who applied, upgraded or rolled back what, and when (history.jsonl).", examples(
        f"hotfix log {PY}",
        f"hotfix log mamba-align-block-size {PY} --json",
        "hotfix log --all")),
    "verify": ("""Exit 0 only if every named (or recorded, or locked) hotfix is in effect.

Prints one line per problem and what to do. Nothing named and nothing recorded is exit 1, never a
pass (a rebuild that lost the files may have lost the record too). With --lock (env HOTFIX_LOCK),
the files `hotfix export` wrote are checked against that lock: use it as a container entrypoint guard.""",
               None, examples(
        f"hotfix verify {PY}",
        f"hotfix verify mamba-align-block-size {PY}",
        f"hotfix verify {ASCEND} --json",
        f"hotfix verify --lock /etc/vllm-hotfix/hotfix.lock {PY}",
        "hotfix verify --lock hotfix-export/hotfix.lock --trust trust.toml")),
    "rollback": ("""Take a hotfix out of the files, byte for byte, wherever it sits in the series (hotfix status
lists it): the files go back to their baseline, the record goes.

After an upgrade (v5 -> v6, `hotfix apply ID`), rollback still returns to the baseline, not to v5, and
says so; --to-version 5 goes back to v5 instead: v6 reversed and v5 applied, files and record in one
transaction (the catalog must still have v5).""", "Take a hotfix out of the files, byte for byte.", examples(
        f"hotfix rollback mamba-align-block-size {PY} --dry-run",
        f"hotfix rollback mamba-align-block-size {PY}",
        f"hotfix rollback glm-conv-null-slot {ASCEND}",
        f"hotfix rollback vendor-fix --to-version 5 --catalog ./team {PY}")),
    "recover": ("Finish or undo an apply that was interrupted (kill -9, power loss).\n\n"
                "status and verify report such a target as interrupted (exit 1) and leave it so; this command "
                "finishes it.", None, examples(
        f"hotfix recover {PY} --dry-run",
        f"hotfix recover {PY}",
        f"hotfix recover {ASCEND}")),
    "where": ("""Show which files `import PACKAGE` really loads, from what install, and any shadowing.

Asks the interpreter that runs vLLM (--python, a venv directory works too), not the one running
hotfix. Kinds: wheel, editable, git, directory. Warns about PYTHONPATH / .pth overlays and
duplicate copies on sys.path, and names the files that come through a bind mount.""",
              "Show which files `import PACKAGE` really loads, and shadowing.", examples(
        f"hotfix where vllm {PY} --import",
        "hotfix where vllm_ascend --json")),
    "audit": ("""Check every installed file of PACKAGE against pip's RECORD (exit 1 if not pristine).

Prints only differences, `rpm -V` style: `S.5......` size, `..5......` digest, `missing`,
`unrecorded` (a file in the package directory RECORD does not list; __pycache__/*.pyc ignored),
`stale-bytecode` (a __pycache__ entry Python would load instead of a changed or recorded source,
holding other code); then the hotfixes recorded for the install with their state (exit 1 when one is
not in effect, even on a pristine install: a rebuild or an upgrade under the record).""",
              "Check every installed file of PACKAGE against pip's RECORD.", examples(
        f"hotfix audit vllm {PY}",
        "hotfix audit vllm --json | jq .differences")),
    "list": ("""List the hotfixes in the catalog (the newest version of each; --json: every version).

On a terminal: a table fitted to its width (COLUMNS, else the terminal's). Into a pipe or a file:
one line per hotfix, its fields tab-separated: ID, VERSION, TARGET, FIXED IN, FROM, TITLE.""", None, examples(
        "hotfix list",
        "hotfix list --catalog ./my-catalog",
        "hotfix list | cut -f1",
        "hotfix list --json | jq -r '.[] | select(.latest) | .id'")),
    "show": ("Show one hotfix (ID, or ID@VERSION for an older version): symptoms, targets, patches, references, "
             "fixed-in.", None, examples(
        "hotfix show mamba-align-block-size",
        "hotfix show mamba-align-block-size@1 --json",
        "hotfix show my-fix --catalog ./my-catalog")),
    "doctor": ("""Read crash logs (files, '-' for stdin, .gz too) and name the hotfix or advisory that fixes the crash.

Finds the root error of every process (vLLM's (EngineCore_DP0 pid=...) / (Worker_TP3 ...) prefixes,
CANN plog pids, one file = one process otherwise; its innermost exception first), matches the
catalog's [[signatures]] where each counts (a fault report, a traceback, the log's own error lines, a
config line; never a table or prose), and with --python / --root checks whether the fix is already
in effect on that target. Prints a ranked verdict with the evidence lines (file:line): confident
(apply), possible (a generic error and a condition of the bug: how to confirm it, then the
`hotfix apply ID --dry-run` to run), or no candidate (a generic error alone: who shares it).""",
               "Find the known issue (and its fix) behind a crash log.", examples(
        f"docker logs vllm 2>&1 | hotfix doctor - {PY}",
        "hotfix doctor vllm.log.gz dmesg.txt --json",
        f"hotfix doctor ~/ascend/log/debug/plog/*.log server.log {ASCEND}") + "\n" + DOCTOR_EXIT_HELP),
    "new": ("""Author a hotfix: write patches/ID/*.patch and manifests/ID.toml with hashes and stats.

Then `hotfix show ID --catalog DIR` shows it and `hotfix check-catalog ID --catalog DIR` tries it
on every release in its range.""", "Author a hotfix from an upstream commit or a hand-edited install.", examples(
        "hotfix new glm-conv-null-slot --from-commit f5826a4 --repo ./vllm-ascend \\",
        "    --exclude 'release_notes/**' --add-patch zero-null-row.patch \\",
        "    --target vllm-ascend --versions '==0.30.0rc2' --out ./my-catalog",
        f"hotfix new my-fix --from-install vllm {PY} --out ./my-catalog",
        "hotfix new vllm-0-25-1 --from-release vllm==0.25.1 --base 0.25.0 --out ./my-catalog",
        "hotfix new vllm-0-25-1 --from-release vllm==0.25.1 --split-by-file --out ./my-catalog")),
    "check-catalog": ("""Dry-run every manifest against every published release in its range (real wheels).

Prints an ID x release matrix: applies / fixed-upstream / fails / not-applicable (git targets
are skipped). A release published only as an sdist (most vllm-ascend releases) is read from the
sdist; --repo reads each release from its tag (v0.23.0) in a local clone instead. Pre-releases
count where the range names one (PEP 440: '==0.23.0rc1', '>=0.30.0rc1'). Files are cached in
~/.cache/vllm-hotfix/wheels. Exit 1 if a release in range fails.""",
                      "Dry-run every hotfix against every published release in range.", examples(
        "hotfix check-catalog --versions 0.30.0,0.31.0,0.32.0",
        "hotfix check-catalog mamba-align-block-size --versions '>=0.29' --json",
        "hotfix check-catalog glm-conv-null-slot --versions '>=0.29.0rc1'",
        "hotfix check-catalog va023-fia-v2-contiguous-kv --repo ./vllm-ascend --versions 0.23.0rc1,0.23.0",
        "hotfix check-catalog --catalog ./my-catalog")),
    "port": ("""Port a catalog hotfix to published releases where none of its patches applies.

Each release is judged like check-catalog (real wheels, cached): applies, fixed-upstream,
not-applicable, unavailable. Where no variant applies, the pristine files of the nearest release
where one does are merged three ways with the new release (`git merge-file`, then by words),
the result must pass the manifest's [[checks]], and becomes patches/ID/<release>.patch with its
versions range, md5, sha256 and stats. Exit 4 if a release conflicts (the hunk and both sides are
printed), 10 if a release could not be downloaded; then nothing is written. Needs git.""",
             "Port a hotfix to the published releases where none of its patches applies.", examples(
        "hotfix port mamba-align-block-size --versions '>=0.26,<0.32' --out ./my-catalog --dry-run",
        "hotfix port my-fix --catalog ./my-catalog --out ./my-catalog     # update in place")),
    "contains": ("""Is this fix in this install (or in each published release), decided from the files?

\b
Answers:
  contained       the files hold the fix's post-image (upstream merged it, or fixed_in says so)
  applied         recorded here by `hotfix apply` and in effect
  applicable      not there; the patch applies as it is
  partly          some files or hunks hold the post-image, the rest does not apply
  conflicts       nothing of it is there, and the patch does not apply
  not-applicable  outside the hotfix's targets
  stale-bytecode  recorded and in the files, but Python would load a __pycache__ entry
                  holding other code
Exit: 0 contained/applied, 1 applicable/stale-bytecode, 3 not-applicable, 4 partly/conflicts;
with --versions 0 when every release was answered, 10 when one could not be downloaded.""",
                 "Is a fix (catalog ID or raw diff) in this install or in published releases, by content?", examples(
        f"hotfix contains mamba-align-block-size {PY}",
        "hotfix contains --patch fix.diff --versions '>=0.29'",
        "hotfix contains --patch fix.diff --root /vllm-workspace/vllm")),
    "export": ("Write patched files (from a pristine baseline) and a hotfix.lock for bind mounts.\n\n"
               "Nothing in the install is changed. Sign the lock after each export (`hotfix sign`); `hotfix "
               "compose` and `hotfix k8s` mount what it wrote.", None, examples(
        f"hotfix export mamba-align-block-size --to hotfix-export {PY}",
        "hotfix export mamba-align-block-size --to hotfix-export --lock-version 8 --expires 30d",
        "hotfix sign hotfix-export/hotfix.lock --key release.key")),
    "compose": ("Add (or --remove) read-only bind mounts of exported patched files to a compose service.\n\n"
                "The files and hotfix.lock come from `hotfix export` (--export-dir); the compose file is edited "
                "in place, byte for byte outside the lines added, or the mounts go to an --override file. The "
                "export's guard is mounted too: an export without it is refused (exit 3) unless --no-guard says "
                "the image has vllm-hotfix-guard installed itself (with --no-strict).\n\n"
                "Strict mode is on by default, as in `hotfix k8s`: HOTFIX_STRICT=1 goes into the service's "
                "environment beside HOTFIX_LOCK, so vLLM refuses to serve when a hotfix is not in effect (a "
                "container recreated without a mount); --no-strict writes none (the guard only logs). A "
                "HOTFIX_STRICT the service sets itself must agree with the option (exit 3 otherwise).",
                "Add or --remove read-only bind mounts of patched files in compose.", examples(
        "hotfix compose mamba-align-block-size --service vllm --dry-run",
        "hotfix compose mamba-align-block-size --service vllm --override compose.hotfix.yaml",
        "hotfix compose mamba-align-block-size --service vllm --file deploy/compose.yaml --remove",
        "hotfix compose mamba-align-block-size --service vllm --no-strict   # the guard only logs",
        "hotfix compose mamba-align-block-size --service vllm --no-guard --no-strict   # image has it")),
    "k8s": ("""Write a kustomize overlay: ConfigMaps with the exported files and hotfix.lock, read-only subPath
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
With --trust POLICY every lock approved must pass that policy, as `verify --lock` judges it.""",
            "Write a kustomize overlay mounting an export into a Kubernetes workload (or --admission: a policy).",
            examples(
        "hotfix k8s --export-dir hotfix-export --base k8s/base --to k8s/hotfix \\",
        "    --workload deployment/vllm --container vllm",
        "kubectl apply -k k8s/hotfix",
        "hotfix k8s --bundle \"registry.example/team/vllm-hotfix@sha256:$DIGEST\" --bundle-dir bundle \\",
        "    --base k8s/base --to k8s/hotfix --workload deployment/vllm --container vllm",
        "hotfix k8s --admission --approve bundle --namespace inference --trust trust.toml --to admission",
        "hotfix k8s --admission --namespace inference --to k8s/admission \\",
        "    --approve \"registry.example/vllm-openai@sha256:$DIGEST=hotfix-export/hotfix.lock\"")),
    "bake": ("Write a build context whose Containerfile bakes an export into a derived image: the patched files "
             "over site-packages, hotfix.lock, and only the guard's wheel (pip --no-index --no-deps: no index, no "
             "network, no vllm-hotfix in the image); the build fails unless `python -m vllm_hotfix_guard verify` passes.",
             "Write a Containerfile deriving an image with an export's hotfixes baked in and verified.", examples(
        "hotfix export mamba-align-block-size --to hotfix-export --python /opt/vllm/bin/python",
        "hotfix bake --export-dir hotfix-export --base vllm/vllm-openai:v0.30.0 --to bake-context",
        "docker build -f bake-context/Containerfile -t vllm-openai:v0.30.0-hotfix bake-context")),
    "gc": ("""Remove recorded state, journals and backups kept for targets (venvs, checkouts) that are gone.

A missing target may only be away for a while (a checkout moved, a volume not mounted): its
state, the only way back to the original files, is kept until the target has been missing for
--older-than (counted from the first `hotfix gc` that found it missing), or until --confirm PATH
says it is gone for good. A target that exists is never touched. --dry-run lists what would be
removed and what is kept, and why, and writes nothing.""",
           "Remove the state of targets gone for good; keep what is only missing for a while.", examples(
        "hotfix gc --dry-run",
        "hotfix gc --older-than 30d",
        "hotfix gc --confirm /opt/old-venv/lib/python3.12/site-packages")),
    "guard": ("Print env lines for the vllm.general_plugins guard that checks every vLLM process (--print-env), "
              "or check that vLLM started with this environment by the interpreter that runs it (--python / "
              "HOTFIX_PYTHON, else the one behind `vllm` on PATH) would load it (--check-env).",
              "Print env lines that turn on the in-process vLLM guard, or check this environment.", examples(
        "hotfix guard --print-env",
        "hotfix guard --print-env --format k8s --lock /etc/vllm-hotfix/hotfix.lock",
        "hotfix guard --print-env --require mamba-align-block-size --format shell",
        f"hotfix guard --check-env {PY}")),
    "sign": ("""Sign a lock, a trust policy or a catalog (--catalog DIR) with a minisign secret key.

Writes FILE.minisig beside FILE, minisign's default name, so `minisign -V -m FILE -p KEY.pub`
accepts it as pasted; a further key gets FILE.<KEYID>.minisig (KEYID: the key id minisign prints,
16 hex digits; `minisign -V -m FILE -x FILE.<KEYID>.minisig -p KEY.pub`), one file per key; the
command prints the check for the file it wrote. A signature `minisign -S` wrote under either name
counts the same. The signature is prehashed (BLAKE2b-512, as minisign's default) and its trusted
comment is signed too. FILE is never changed; re-sign after every `hotfix export`. A catalog gets
DIR/hotfix-catalog.sha256 (every file of manifests/ and patches/, as sha256sum writes it) and its
signature.

Keys come from `minisign -G` (encrypted with scrypt) or `minisign -G -W` (unencrypted). The
password of an encrypted key: --password-file FILE or HOTFIX_KEY_PASSWORD_FILE (its first line;
a mounted secret in CI), else HOTFIX_KEY_PASSWORD, else a prompt on the terminal; never an argument.""",
             "Sign a lock, a trust policy or a catalog in minisign's format.", examples(
        "minisign -G -p release.pub -s release.key",
        "hotfix sign hotfix-export/hotfix.lock --key release.key",
        "HOTFIX_KEY_PASSWORD_FILE=/run/secrets/key-pw hotfix sign hotfix-export/hotfix.lock --key sre.key",
        "hotfix sign --catalog ./my-catalog --key release.key",
        "hotfix verify --lock hotfix-export/hotfix.lock --trust trust.toml")),
    "pack": ("""Pack an export into a hotfix bundle: an OCI image layout (one layer: the patched files under
site-packages/ at their site-packages-relative paths, hotfix.lock and its signature files) that
Kubernetes mounts as an image volume pinned by digest, for fixes past the 1 MiB a ConfigMap holds.

The export is what `hotfix export --to DIR` wrote (--export-dir; every file is checked against the
lock's sha256 first, no symlink is followed), or IDs exported on the fly from --python. The image is
reproducible: the same export gives the same digest. It is a runnable image (a real config with
rootfs.diff_ids, as containerd requires for image volumes), one manifest per --platform under an
image index. Push it with skopeo; the command prints the line.""",
             "Pack an export into an OCI image (a hotfix bundle) for a Kubernetes image volume.", examples(
        "hotfix pack --export-dir hotfix-export --to bundle --repository registry.example/team/hotfix",
        f"hotfix pack mamba-align-block-size {PY} --to bundle \\",
        "    --platform linux/amd64 --platform linux/arm64",
        "skopeo inspect oci:bundle")),
    "trust": ("Trust policies (HOTFIX_TRUST): who must have signed a lock or a catalog (docs/trust.md).",
              "Trust policies: rotate to a newer one signed by the current keys.", examples(
        "hotfix trust rotate trust-v2.toml --trust /etc/vllm-hotfix/trust.toml --dry-run")),
    "trust rotate": ("""Replace the trust policy (--trust) by NEW, a higher version signed by the policy's keys.

NEW must carry a higher `version`, and signatures (NEW.minisig, NEW.<KEYID>.minisig: `hotfix sign
NEW --key ...`) by `threshold` keys of the current policy and by `threshold` of its own. Then it replaces
the current file (atomically, with its signatures), and the old keys stop counting. --chain DIR
also writes DIR/policy-<version>.toml: containers whose image pins an older policy walk that
chain with HOTFIX_TRUST_CHAIN=DIR, each step checked against the one before. Exit 11-14 names
what is missing (docs/exit-codes.md); nothing is written then.""",
                     "Replace the policy by a newer one its keys signed.", examples(
        "hotfix sign trust-v2.toml --key release.key",
        "hotfix sign trust-v2.toml --key sre.key",
        "hotfix trust rotate trust-v2.toml --trust /etc/vllm-hotfix/trust.toml --dry-run",
        "hotfix trust rotate trust-v2.toml --trust ./trust.toml --chain ./trust-chain")),
}


def texts(name: str, table: dict | None = None) -> dict:
    """click's help=, short_help= and epilog= of the command ``name`` (``"trust rotate"`` for a subcommand),
    from TEXTS or ``table`` (cli_feed.py's)."""
    text, short, epilog = (TEXTS if table is None else table)[name]
    return {"help": text, "short_help": short, "epilog": epilog}
