"""Which processes ``ready`` expects (vLLM's own configuration, or ``--expect``), and its judgement of
the records against them (docs/readiness.md). Stdlib only; ``os`` alone at import (the probe's budget).

From vLLM's command line (``/proc/1/cmdline``, or ``--pid N``'s; a ``sh -c "..."`` string split at
spaces), as ``vllm serve`` (vllm/entrypoints/cli/serve.py, 0.30.0) decides it:
- API servers: ``--api-server-count``/``-asc``; without it 0 with ``--headless``, 1 with an external load
  balancer (``--data-parallel-rank``, ``--data-parallel-external-lb``), ``--data-parallel-size-local``
  with a hybrid one (``--data-parallel-start-rank``/``-dpr``, ``--data-parallel-hybrid-lb``), else
  ``--data-parallel-size``. One API server is the ``vllm serve`` process itself; more are ``ApiServer_N``.
- engine cores: one per local data-parallel rank: 1 with ``--data-parallel-rank``, else
  ``--data-parallel-size-local``/``-dpl``, else ``--data-parallel-size``/``-dp`` (default 1).
- workers: ``--tensor-parallel-size``/``-tp`` x ``--pipeline-parallel-size``/``-pp`` per engine core,
  none when that is 1 (the engine core runs its one worker itself).
A ``--config`` file, ``--distributed-executor-backend ray`` or ``external_launcher`` (workers elsewhere)
cannot be judged from the command line: ``--expect`` is then required. Options are read as vLLM's argparse
reads them: ``_`` for ``-``, ``=`` or the next word, and a unique prefix of a long option (``--tensor-parallel
2``); a prefix of several options read here is "cannot tell", never a guess.
"""

from __future__ import annotations

from vllm_hotfix_guard.ready_io import quote, start_time

USAGE = "usage: python -m vllm_hotfix_guard ready [--expect api=N,engine=N,worker=N] [--pid PID] [--json]"
LIMIT = 4096  # a count in --expect or on the command line
CMDLINE_LIMIT = 1 << 20
ALIASES = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size", "-dp": "--data-parallel-size",
           "-dpl": "--data-parallel-size-local", "-asc": "--api-server-count", "-dpr": "--data-parallel-start-rank"}
COUNTS = ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--data-parallel-size-local",
          "--api-server-count", "--data-parallel-rank", "--data-parallel-start-rank")
FLAGS = ("--headless", "--data-parallel-external-lb", "--data-parallel-hybrid-lb")
REFUSED = ("--config",)
KNOWN = COUNTS + FLAGS + REFUSED + ("--distributed-executor-backend",)  # every option read here


class Usage(Exception):
    """Bad options, or nothing to read the expected set from (exit 2)."""


class Options:
    __slots__ = ("spec", "pid", "as_json")

    def __init__(self) -> None:
        self.spec, self.pid, self.as_json = None, 1, False


class Expected:
    """How many processes of each kind must have recorded "in effect"; ``world``: workers per engine core
    (TPxPP; 0: not known), ``tp``: the tensor-parallel size (0: not known)."""

    __slots__ = ("api", "engine", "worker", "world", "tp", "source")

    def __init__(self, api: int, engine: int, worker: int, world: int, tp: int, source: str) -> None:
        self.api, self.engine, self.worker, self.world, self.tp, self.source = api, engine, worker, world, tp, source

    def as_dict(self) -> dict:
        return {"api": self.api, "engine": self.engine, "worker": self.worker, "from": self.source}

    def describe(self) -> str:
        return f"api={self.api},engine={self.engine},worker={self.worker} ({self.source})"


def parse_options(argv: list[str]) -> Options:
    options, args = Options(), list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if name in ("--expect", "--pid") and not eq:
            if not args:
                raise Usage(f"{name} needs a value; {USAGE}")
            value = args.pop(0)
        if name == "--expect":
            options.spec = value
        elif name == "--pid":
            options.pid = _count(value, "--pid", low=1, high=1 << 22)
        elif arg == "--json":
            options.as_json = True
        else:
            raise Usage(f"unknown argument {quote(arg)}; {USAGE}")
    return options


def _count(value: str, what: str, *, low: int = 0, high: int = LIMIT) -> int:
    if not (value.isascii() and value.isdigit() and len(value) < 10) or not low <= int(value) <= high:
        raise Usage(f"{what}: {quote(value)} is not a number from {low} to {high}")
    return int(value)


def from_spec(spec: str) -> Expected:
    """``api=1,engine=2,worker=8`` (a kind left out: 0)."""
    counts = {"api": 0, "engine": 0, "worker": 0}
    for part in spec.split(","):
        key, eq, value = part.strip().partition("=")
        if key not in counts or not eq:
            raise Usage(f"--expect: {quote(part)} is not api=N, engine=N or worker=N")
        counts[key] = _count(value, f"--expect {key}")
    world = counts["worker"] // counts["engine"] if counts["engine"] and counts["worker"] % counts["engine"] == 0 else 0
    return Expected(counts["api"], counts["engine"], counts["worker"], world, 0, "--expect")


def from_process(pid: int) -> Expected:
    from vllm_hotfix_guard.ready_io import read_small

    try:
        data = read_small(f"/proc/{pid}/cmdline", CMDLINE_LIMIT)
    except OSError as exc:
        raise Usage(f"cannot read /proc/{pid}/cmdline: {exc.strerror}; give --expect") from None
    argv = [a.decode("utf-8", "replace") for a in (data or b"").split(b"\x00") if a]
    return from_argv(argv, f"/proc/{pid}/cmdline")


def from_argv(argv: list[str], source: str) -> Expected:
    """The expected set of a ``vllm serve`` command line (the module's docstring says what is read)."""
    if "serve" not in argv:  # sh -c "vllm serve ...": the one string split at spaces
        argv = next((a.split() for a in argv if "serve" in a.split()), argv)
    if "serve" not in argv:
        raise Usage(f"{source} runs no `vllm serve` ({quote(' '.join(argv)[:200])}); give --expect, or --pid "
                    f"of the vllm serve process")
    found: dict = {}
    args = argv[argv.index("serve") + 1:]
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        name = _option(ALIASES.get(name, name.replace("_", "-") if name.startswith("--") else name), source)
        if name in REFUSED or (name == "--distributed-executor-backend" and (value or (args[:1] or [""])[0])
                               in ("ray", "external_launcher")):
            raise Usage(f"{source}: {name} {quote(value or (args[:1] or [''])[0])}: the processes cannot be "
                        f"told from the command line; give --expect")
        if name in COUNTS:
            if not eq:
                value = args.pop(0) if args else ""
            found[name] = _count(value, f"{source}: {name}")
        elif name in FLAGS:
            found[name] = True
    return _expected(found, source)


def _option(name: str, source: str) -> str:
    """``name`` as vLLM's parser takes it: argparse accepts a unique prefix of a long option (``--tensor-parallel
    2`` is ``--tensor-parallel-size 2``). vLLM started, so a prefix of one option read here was unique among all
    of its options: it is that one; a prefix of several cannot be told (a count left out would be read as
    fewer processes: never guessed)."""
    if not name.startswith("--") or name in KNOWN:
        return name
    near = [known for known in KNOWN if known.startswith(name)]
    if len(near) > 1:
        raise Usage(f"{source}: {quote(name)} abbreviates {' or '.join(near)}: the processes cannot be told from the "
                    "command line; give --expect")
    return near[0] if near else name


def _expected(found: dict, source: str) -> Expected:
    tp, pp = found.get("--tensor-parallel-size", 1), found.get("--pipeline-parallel-size", 1)
    dp, dp_local = found.get("--data-parallel-size", 1), found.get("--data-parallel-size-local")
    external = "--data-parallel-rank" in found or "--data-parallel-external-lb" in found
    hybrid = "--data-parallel-start-rank" in found or "--data-parallel-hybrid-lb" in found
    engines = 1 if external else dp_local if dp_local is not None else dp
    api = found.get("--api-server-count")
    if api is None:
        api = 0 if "--headless" in found else 1 if external else (dp_local or 1) if hybrid else dp
    world = tp * pp
    return Expected(api, engines, engines * world if world > 1 else 0, world, tp, source)


def judge(records: list, wanted: Expected, problems: list[str]) -> tuple[list[str], dict]:
    """One line per problem: a record that is not one, a live process not in effect, an expected process
    with no live record in effect. Records of processes started before the container (PID 1) or no longer
    running (their pid gone, or another process's now) do not count. Also the in-effect counts."""
    since = start_time(1) or 0
    live = [r for r in records if r.start >= since and start_time(r.pid) == r.start]
    lines = list(problems)
    lines += [f"{r.kind} {quote(r.role)} pid {r.pid}: NOT IN EFFECT: {', '.join(quote(f) for f in r.failing)}"
              for r in live if not r.in_effect]
    good = [r for r in live if r.in_effect]
    kinds = {kind: [r for r in good if r.kind == kind] for kind in ("main", "api", "engine", "worker")}
    lines += _api(kinds, wanted.api) + _engines(kinds["engine"], wanted.engine) + _workers(kinds, wanted)
    counted = {"api": len(kinds["api"]) or min(len(kinds["main"]), 1), "engine": len(kinds["engine"]),
               "worker": len(kinds["worker"])}
    return lines, counted


def _api(kinds: dict, want: int) -> list[str]:
    if want == 1:
        if kinds["main"] or kinds["api"]:
            return []
        return ['api server "main (vllm serve)": no record in effect']
    seen = {r.rank for r in kinds["api"]}
    if len(kinds["api"]) >= want:
        return []
    return [f"api server {quote(f'ApiServer_{i}')}: no record in effect" for i in range(want) if i not in seen] \
        or [f"api servers: {len(kinds['api'])} of {want} recorded in effect"]


def _engines(engines: list, want: int) -> list[str]:
    if len(engines) >= want:
        return []
    if want == 1:
        return ['engine core "EngineCore": no record in effect']
    seen = {r.dp for r in engines}
    return [f"engine core {quote(f'EngineCore_DP{i}')}: no record in effect" for i in range(want) if i not in seen] \
        or [f"engine cores: {len(engines)} of {want} recorded in effect"]


def _workers(kinds: dict, wanted: Expected) -> list[str]:
    workers = kinds["worker"]
    short = wanted.worker - len(workers)
    if short <= 0:
        return []
    lines = []
    if wanted.world:
        for engine in sorted(kinds["engine"], key=lambda r: (r.dp is None, r.dp or 0, r.pid)):
            ranks = {_rank(w, wanted.tp) for w in workers if w.ppid == engine.pid}
            lines += [f"worker {quote(f'VllmWorker-{rank}')} of {quote(engine.role)} pid {engine.pid}: no record in effect"
                      for rank in range(wanted.world) if rank not in ranks]
    if len(lines) != short:  # workers not children of the engine cores recorded: counted, not named
        lines = [f"workers: {len(workers)} of {wanted.worker} recorded in effect"]
    return lines


def _rank(worker, tp: int):
    if worker.rank is not None:
        return worker.rank
    return worker.pp * tp + worker.tp if tp and worker.tp is not None and worker.pp is not None else None
