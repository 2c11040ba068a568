"""Facts about how PACKAGE resolves in *this* interpreter, printed as one line (a Python literal).

Self-contained and stdlib-only: vllm-hotfix runs this file's source in the target interpreter
(``PY -c SOURCE PACKAGE [--import]``, or ``-`` and the name on stdin; Python 3.10-3.13), which usually has no vllm-hotfix installed.
It reports facts only; install/locate.py turns them into a Target and warnings. It runs at every
container start (`hotfix verify --lock --python`), so it imports nothing it does not need on the
common path: the facts go out as a Python literal (``repr``), read back with ``read_facts`` -- no
``json`` in the target (4 ms), no ``ast`` unless an editable finder must be read (9 ms).
PYTHONPATH and .pth files are deliberately honoured: they are what decides which copy is loaded.
"""

import os
import site
import stat
import sys

MARKER = "@@vllm-hotfix-probe@@"
GUARD_PLUGIN = "vllm_hotfix_guard"       # the entry point vLLM's plugin loader must find ...
GUARD_GROUP = "vllm.general_plugins"     # ... in this group (pyproject.toml declares it)
GUARD_ENTRY_POINTS, GUARD_LOAD = "entry-points", "load"  # what the probe asks about the guard (--guard, --guard-load)


def _site_dirs():
    dirs = []
    try:
        dirs.extend(site.getsitepackages())
    except AttributeError:
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    for entry in sys.path:
        if entry.endswith("site-packages") or entry.endswith("dist-packages"):
            dirs.append(entry)
    seen, result = set(), []
    for d in dirs:
        real = os.path.realpath(d)
        if real not in seen and os.path.isdir(d):
            seen.add(real)
            result.append(d)
    return result


def _pth_files(site_dirs):
    """Every .pth file: the directories its plain lines add and its `import` lines (code run at startup)."""
    found = []
    for d in site_dirs:
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith(".pth"))
        except OSError:
            continue
        for name in names:
            path = os.path.join(d, name)
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    lines = fh.read().splitlines()
            except OSError:
                continue
            added, code = [], []
            for line in lines:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                if line.startswith(("import ", "import\t")):
                    code.append(line[:1000])
                    continue
                added.append(os.path.normpath(os.path.join(d, line)))
            found.append({"file": path, "adds": added, "code": code})
    return found


def _finder_mapping(path):
    """MAPPING of a setuptools ``__editable___*_finder.py``: import name -> real directory."""
    import ast

    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
    except (OSError, SyntaxError, ValueError):
        return {}
    for node in tree.body:
        target = value = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and target.id == "MAPPING" and value is not None:
            try:
                mapping = ast.literal_eval(value)
            except ValueError:
                return {}
            return {str(k): str(v) for k, v in mapping.items()} if isinstance(mapping, dict) else {}
    return {}


def _editable_finders(site_dirs, package):
    found = []
    for d in site_dirs:
        try:
            names = sorted(n for n in os.listdir(d) if n.startswith("__editable__") and n.endswith("_finder.py"))
        except OSError:
            continue
        for name in names:
            path = os.path.join(d, name)
            mapping = _finder_mapping(path)
            if package in mapping:
                found.append({"file": path, "path": mapping[package]})
    return found


def _copies(package, path_entries):
    """sys.path entries holding a copy of PACKAGE, in import order."""
    found = []
    for entry in path_entries:
        base = entry or os.getcwd()
        if not os.path.isdir(base):
            continue
        pkg_dir = os.path.join(base, package)
        if os.path.isfile(os.path.join(pkg_dir, "__init__.py")):
            found.append({"entry": entry, "path": pkg_dir})
        elif os.path.isfile(os.path.join(base, package + ".py")):
            found.append({"entry": entry, "path": os.path.join(base, package + ".py")})
    return found


def dist_info_name(name):
    """core/distname.canonical_name with "_" for "-" (as in dist-info directory names): its copy here,
    as this file runs alone in the target interpreter (tests/core/test_distname.py: they agree)."""
    out = []
    for ch in name.lower():
        if ch in "-_.":
            if not out or out[-1] != "_":
                out.append("_")
        else:
            out.append(ch)
    return "".join(out)


def _read(path):
    data = read_bytes(path)
    return None if data is None else data.decode("utf-8", "replace")


def metadata_headers(text):
    """Name and Version from a METADATA / PKG-INFO header block (they are never folded). Only the block is
    split: a vLLM METADATA carries its ~60 KB README after it (splitting it all cost the guard 0.2 ms)."""
    found = {}
    text = text or ""
    end = text.find("\n\n")  # the block ends at the first empty line (or earlier, at a blank one: below)
    for line in (text if end < 0 else text[:end]).splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and key in ("Name", "Version") and key not in found:
            found[key] = value.strip()
    return found


_OPEN = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


def _metadata_entries(base):
    """(name, is a directory) of every *.dist-info / *.egg-info in BASE, by name: one scandir (its
    d_type answers "directory?" without a stat per entry, following a symlink as os.path.isdir does)."""
    found = []
    try:
        with os.scandir(base) as listing:
            for entry in listing:
                if entry.name.endswith((".dist-info", ".egg-info")):
                    try:
                        is_dir = entry.is_dir()
                    except OSError:
                        is_dir = False
                    found.append((entry.name, is_dir))
    except OSError:
        return []
    found.sort()
    return found


def metadata_dirs(path_entries):
    """Every *.dist-info / *.egg-info on sys.path, in the order importlib.metadata searches them."""
    return [os.path.join(entry or ".", name) for entry in path_entries for name, _ in _metadata_entries(entry or ".")]


def _open_dir(base):
    try:
        return os.open(base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except (OSError, TypeError):
        return None


def _provides(at, info_dir, package):
    """Does the distribution at INFO_DIR ship the top-level PACKAGE? The rule of importlib.metadata's
    packages_distributions(): top_level.txt when it names anything, else the installed file list
    (RECORD, installed-files.txt, SOURCES.txt), searched as bytes while read (``_lists``). AT: (the fd
    of INFO_DIR's sys.path entry, INFO_DIR's name in it) or None (see ``_open_file``)."""
    declared = read_bytes(info_dir + "/top_level.txt", at, "top_level.txt")
    if declared and declared.split():
        return package.encode() in declared.split()
    opened, prefix = _open_record(info_dir, at), b""
    if opened is None:
        opened, prefix = _open_file(info_dir + "/installed-files.txt", at, "installed-files.txt"), b"../"
    if opened is None:
        opened, prefix = _open_file(info_dir + "/SOURCES.txt", at, "SOURCES.txt"), b""
    if opened is None:
        return False
    return _lists(opened, prefix + package.encode())


CHUNK = 1 << 16  # read and searched a chunk at a time: a fresh 1 MB buffer costs ~2 ms of page faults here


def _lists(opened, head, any_line=False):
    """Is a line of the open file OPENED ((fd, size), closed here) the directory HEAD/... or the module
    HEAD.py, quoted or not (RECORD quotes a path holding a comma)? With ANY_LINE: does a line start
    with HEAD? One search for HEAD over each chunk read, each hit checked to start a line: the 7 MB of
    a vLLM image's RECORDs are never held, split or decoded."""
    fd, size = opened
    n = len(head)
    carried, done = b"\n", 0  # the file's start is a line start; then the previous window's last n + 6 bytes
    try:
        while True:
            chunk = os.read(fd, CHUNK)
            done += len(chunk)
            final = not chunk or (done >= size and len(chunk) < CHUNK)  # no read just to see the end
            window = carried + chunk
            usable = len(window) if final else len(window) - n - 4  # a hit whose tail is cut: next window
            at = window.find(head, 1)
            while 0 <= at <= usable:
                before = window[at - 1:at]
                if any_line:
                    if before == b"\n":
                        return True
                elif before == b"\n" or (before == b'"' and window[at - 2:at - 1] == b"\n"):
                    tail = window[at + n:at + n + 4]
                    if tail[:1] == b"/" or tail in (b".py,", b".py\n", b".py\r", b".py"):
                        return True
                at = window.find(head, at + 1)
            if final:
                return False
            carried = window[-(n + 6):]
    except OSError:
        return False
    finally:
        os.close(fd)


def read_bytes(path, at=None, name=None):
    """The bytes of the regular file PATH, or None (see ``_open_file``)."""
    opened = _open_file(path, at, name)
    return None if opened is None else _read_fd(*opened)


def _open_file(path, at=None, name=None):
    """(fd, size) of the regular file PATH, or None (absent, unreadable, not a regular file: never blocks
    on a FIFO, never reads a device). AT: (directory fd, the name in it of PATH's parent), with NAME
    the file's name: one openat relative to a sys.path entry opened once, not a walk of all of PATH."""
    try:
        if at is not None and at[0] is not None:
            fd = os.open(at[1] + "/" + name, _OPEN, dir_fd=at[0])
        else:
            fd = os.open(path, _OPEN)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
    except OSError:
        info = None
    if info is None or not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return None
    return fd, info.st_size


def _read_fd(fd, size):
    try:
        data = os.read(fd, size + 1)
        if len(data) <= size:
            return data
        chunks = [data]
        while True:  # it grew since fstat
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)


def _open_record(info_dir, at=None):
    """(fd, size) of INFO_DIR's RECORD (a .dist-info has one), or None."""
    return _open_file(info_dir + "/RECORD", at, "RECORD") if info_dir.endswith(".dist-info") else None


def guard_entry_points(path_entries):
    """The values of the ``vllm.general_plugins`` entry points named vllm_hotfix_guard on PATH_ENTRIES, first
    first (what ``importlib.metadata.entry_points(group=...)`` gives vLLM's loader), read straight from
    each entry_points.txt that mentions the name: importing importlib.metadata and scanning every
    distribution costs ~30 ms in a vLLM venv, paid at every container start."""
    found = []
    for info_dir in metadata_dirs(path_entries):
        data = read_bytes(os.path.join(info_dir, "entry_points.txt"))
        if data is None or GUARD_PLUGIN.encode() not in data:
            continue
        section = None
        for line in data.decode("utf-8", "replace").splitlines():
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                section = line.strip("[]")  # importlib.metadata's reading: spaces inside are kept
            elif section == GUARD_GROUP and "=" in line:
                name, _, value = line.partition("=")
                if name.strip() == GUARD_PLUGIN:
                    found.append(value.strip())
    return found


def load_entry_point(value):
    """What vLLM's loader does with an entry point (``EntryPoint.load()``): import MODULE, then each attribute."""
    import importlib

    module, _, attr = value.partition(":")
    obj = importlib.import_module(module.strip())
    for part in filter(None, attr.strip().split(".")):
        obj = getattr(obj, part)
    return obj


def guard_facts(path_entries, load=True):
    """Would vLLM started with this interpreter load the guard? Its entry points (first first) and, with
    LOAD, what loading the first one raises (None: it loads) -- asked in the interpreter that runs vLLM,
    since the entry points of the one running hotfix (a pipx / `uv tool` venv) say nothing about it.
    Loading imports the guard and what it imports (~35 ms in a fresh interpreter), so the probe
    only does it when asked (``--guard-load``: `hotfix guard --check-env`)."""
    found = guard_entry_points(path_entries)
    error = None
    if found and load:
        try:  # then what register() imports once HOTFIX_LOCK / HOTFIX_REQUIRE is set (the guard's preflight)
            preflight = getattr(sys.modules.get(getattr(load_entry_point(found[0]), "__module__", None) or ""),
                                "preflight", None)
            callable(preflight) and preflight()
        except Exception as exc:  # noqa: BLE001 - exactly what vLLM's loader would hit
            error = "%s: %s" % (type(exc).__name__, exc)
    return {"entry_points": found, "load_error": error, "loaded": bool(found and load)}


def _distributions(package, path_entries, package_dir=None):
    """[the distribution] PACKAGE's loaded copy (in PACKAGE_DIR) belongs to, as install/facts.decide
    chooses it, found with as little reading as that needs; [] for none. Providers are those of
    importlib.metadata.packages_distributions() (``_provides``), read straight from the metadata
    directories (importing importlib.metadata and parsing every METADATA costs 60 ms in a vLLM venv).
    The first provider with a METADATA Name, in this order: 1. in a sys.path entry holding PACKAGE_DIR,
    one named as PACKAGE (pip's own record of the loaded files, preferred to a vendor plugin that also
    drops files into the package); 2. any in such an entry; 3. any in the other entries (first on
    sys.path first, by name within an entry); 4. with no provider (an editable install's RECORD lists
    only its finder), one named as PACKAGE, beside PACKAGE_DIR first. Step 1 answers a wheel install
    from one top_level.txt; an entry is listed only when a step gets to it (the guard runs this in every
    vLLM process, over ~200 distributions)."""
    wanted = {dist_info_name(package), dist_info_name(package.replace("_", "-"))}
    home = os.path.realpath(package_dir) if package_dir else None
    around = _ancestors(home) if home is not None else set()
    entries = []  # (base, holds PACKAGE_DIR) in sys.path order; each listed only when a step gets to it
    for entry in path_entries:
        base = entry or "."
        top = os.path.realpath(base) if _identity(base) in around else None  # one stat rules most entries out
        entries.append((base, top is not None and (home == top or home.startswith(top.rstrip("/") + "/"))))
    listings = {}

    def listed(i):
        return listings[i] if i in listings else listings.setdefault(i, _metadata_entries(entries[i][0]))

    def named(name):
        return dist_info_name(name.rsplit(".", 1)[0].split("-")[0]) in wanted

    def order():
        for step in (1, 2, 3):
            for i, (_, holds) in enumerate(entries):
                if holds == (step < 3):
                    for name, is_dir in listed(i):
                        if is_dir and (step != 1 or named(name)):
                            yield i, name

    fds, tried = {}, set()
    try:
        for i, name in order():
            if (i, name) in tried:
                continue
            tried.add((i, name))
            base = entries[i][0]
            if i not in fds:
                fds[i] = _open_dir(base)
            info_dir = os.path.join(base, name)
            if _provides((fds[i], name), info_dir, package):
                found = _described(info_dir, package)
                if found is not None:
                    return [found]
    finally:
        for fd in fds.values():
            if fd is not None:
                os.close(fd)
    fallback = [(entries[i][1], os.path.join(entries[i][0], name)) for i in range(len(entries))
                for name, _ in listed(i) if named(name)]
    for info_dir in [d for holds, d in fallback if holds] + [d for holds, d in fallback if not holds]:
        found = _described(info_dir, package)
        if found is not None:
            return [found]
    return []


def _identity(path):
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _ancestors(home):
    """(device, inode) of HOME (resolved) and of each directory above it: an entry whose realpath holds
    HOME stats as one of them, so one stat rules most entries out (a realpath lstats every component)."""
    found, path = set(), home
    while os.path.dirname(path) != path:
        found.add(_identity(path))
        path = os.path.dirname(path)
    return (found | {_identity(path)}) - {None}


def _described(info_dir, package):
    """install/facts' view of the distribution at INFO_DIR (None: its METADATA names none)."""
    is_dir = os.path.isdir(info_dir)
    data = read_bytes(os.path.join(info_dir, "METADATA" if info_dir.endswith(".dist-info") else "PKG-INFO")
                      if is_dir else info_dir)
    end = -1 if data is None else data.find(b"\n\n")  # decoded up to the header block's end (no UTF-8 byte is \n)
    meta = None if data is None else (data if end < 0 else data[:end]).decode("utf-8", "replace")
    headers = metadata_headers(meta)
    if meta is None or "Name" not in headers:
        return None
    record = _open_record(info_dir)
    info = {"name": headers["Name"], "version": headers.get("Version"), "dist_info": info_dir,
            "has_record": record is not None, "record_lists_init": False, "direct_url": None}
    if record is not None:
        info["record_lists_init"] = _lists(record, (package + "/__init__.py,").encode(), any_line=True)
    if is_dir:
        info["direct_url"] = _read(os.path.join(info_dir, "direct_url.json"))
    return info


def _find_spec(package):
    """importlib.util.find_spec(PACKAGE) -- for a top-level name, asking sys.meta_path's finders in turn,
    as the import system does (importing importlib.util costs 5 ms: contextlib, and more)."""
    if "." in package or package in sys.modules:
        import importlib.util

        return importlib.util.find_spec(package)
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is not None:
            spec = find(package, None)
            if spec is not None:
                return spec
    return None


def _real_import(package):
    import contextlib
    import importlib

    try:
        with contextlib.redirect_stdout(sys.stderr):
            module = importlib.import_module(package)
        return {"file": getattr(module, "__file__", None), "error": None}
    except BaseException as exc:  # noqa: BLE001 - any failure of user code becomes one line
        message = str(exc).splitlines()[0] if str(exc) else ""
        return {"file": None, "error": f"{type(exc).__name__}: {message}".rstrip(": ")}


def probe(package, do_import=False, guard=None):
    # `python -c` puts the current directory first; a launched server (vllm serve) does not.
    path_entries = [p for i, p in enumerate(sys.path) if not (i == 0 and p == "")]
    sys.path[:] = path_entries
    return _facts(package, path_entries, do_import, guard)


def probe_here(package, guard=None):
    """The same facts for *this* running interpreter, without a process: sys.path without the entry the
    launcher put first (a script's directory, or the current directory for -m), as a fresh
    `python -c` sees it once the probe dropped its ''. sys.path is put back afterwards."""
    saved = list(sys.path)
    skip_first = not getattr(sys.flags, "safe_path", False) and saved and not _is_site_entry(saved[0])
    path_entries = saved[1:] if skip_first else saved
    try:
        sys.path[:] = path_entries
        return _facts(package, path_entries, False, guard)
    finally:
        sys.path[:] = saved


def _is_site_entry(entry):
    return entry.endswith(("site-packages", "dist-packages")) or entry.endswith(".zip")


def install_facts(package, path_entries, site_dirs=None):
    """What decides which install PACKAGE is loaded from (install/facts.py's ``decide``): find_spec's
    answer, the distributions providing it, setuptools editable finders. The in-process guard gathers
    exactly these in every vLLM process; the probe gathers them as part of its facts."""
    facts = {"package": package, "python": sys.executable, "spec": None, "spec_error": None}
    try:
        spec = _find_spec(package)
    except Exception as exc:  # noqa: BLE001 - e.g. a parent package that fails to import
        spec = None
        facts["spec_error"] = f"{type(exc).__name__}: {exc}"
    if spec is not None:
        facts["spec"] = {
            "origin": spec.origin,
            "locations": list(spec.submodule_search_locations or []),
            "loader": type(spec.loader).__name__ if spec.loader else None,
        }
    top = package.split(".")[0]
    spec_facts = facts["spec"] or {}
    origin = spec_facts.get("origin")
    package_dir = (spec_facts.get("locations") or [None])[0] or (
        os.path.dirname(origin) if origin and origin not in ("namespace", "built-in", "frozen") else None)
    facts["distributions"] = _distributions(top, path_entries, package_dir)
    chosen = facts["distributions"][0] if facts["distributions"] else None
    # read only for an editable install: install/facts.decide asks the finders nothing else
    editable = chosen is not None and "editable" in (chosen.get("direct_url") or "")
    facts["editable_finders"] = _editable_finders(_site_dirs() if site_dirs is None else site_dirs, top) if editable else []
    return facts


def _facts(package, path_entries, do_import, guard=None):
    site_dirs = _site_dirs()
    facts = install_facts(package, path_entries, site_dirs)
    facts.update({
        "python_version": "%d.%d.%d" % sys.version_info[:3],
        "prefix": sys.prefix,
        "cwd": os.getcwd(),
        "sys_path": path_entries,
        "pythonpath": [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p],
        "site_dirs": site_dirs,
    })
    top = package.split(".")[0]
    facts["copies"] = _copies(top, path_entries)
    facts["pth_files"] = _pth_files(site_dirs)
    facts["import"] = _real_import(package) if do_import else None
    facts["guard"] = guard_facts(path_entries, load=guard == GUARD_LOAD) if guard else None
    return facts


def main(argv):
    package = argv[0]
    if package == "-":  # started ahead of need: the package name follows on stdin (see locate.start_probe)
        package = sys.stdin.readline().strip()
        if not package:
            return
    guard = GUARD_LOAD if "--guard-load" in argv[1:] else GUARD_ENTRY_POINTS if "--guard" in argv[1:] else None
    facts = probe(package, do_import="--import" in argv[1:], guard=guard)
    sys.stdout.write(MARKER + repr(facts) + "\n")  # str, int, bool, None, list, dict: a literal
    sys.stdout.flush()


def read_facts(stdout):
    """The facts in the probe's output (the last marker line: code run at startup may print too), or None."""
    import ast

    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                facts = ast.literal_eval(line[len(MARKER):])
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return None
            return facts if isinstance(facts, dict) else None
    return None


if __name__ == "__main__":
    main(sys.argv[1:])
