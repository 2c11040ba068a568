"""Facts about how PACKAGE resolves in *this* interpreter, printed as one JSON line.

Self-contained and stdlib-only: vllm-hotfix runs this file's source in the target interpreter
(``PY -c SOURCE PACKAGE [--import]``, Python 3.10-3.13), which usually has no vllm-hotfix installed.
It reports facts only; target/locate.py turns them into a Target and warnings.
PYTHONPATH and .pth files are deliberately honoured: they are what decides which copy is loaded.
"""

import ast
import contextlib
import importlib.util
import json
import os
import site
import sys

MARKER = "@@vllm-hotfix-probe@@"


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


def _distributions(package):
    import importlib.metadata  # here: hotfix imports this module for its source, and pays only when probing

    names = []
    try:
        names = list(importlib.metadata.packages_distributions().get(package, []))
    except Exception:  # noqa: BLE001 - a broken dist-info elsewhere must not hide the answer
        pass
    guess = package.replace("_", "-")
    if not names:
        for candidate in (package, guess):
            try:
                importlib.metadata.distribution(candidate)
            except importlib.metadata.PackageNotFoundError:
                continue
            names.append(candidate)
            break
    result, seen = [], set()
    for name in names:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        path = getattr(dist, "_path", None)
        key = str(path) if path is not None else name
        if key in seen:
            continue
        seen.add(key)
        info = {
            "name": dist.metadata["Name"] or name,
            "version": dist.version,
            "dist_info": str(path) if path is not None else None,
            "has_record": False,
            "record_lists_init": False,
            "direct_url": None,
        }
        record = dist.read_text("RECORD")
        if record is not None:
            info["has_record"] = True
            init = package + "/__init__.py,"
            info["record_lists_init"] = any(line.startswith(init) for line in record.splitlines())
        raw_url = dist.read_text("direct_url.json")
        if raw_url:
            try:
                info["direct_url"] = json.loads(raw_url)
            except ValueError:
                info["direct_url"] = {"invalid": raw_url[:200]}
        result.append(info)
    return result


def _real_import(package):
    try:
        with contextlib.redirect_stdout(sys.stderr):
            module = importlib.import_module(package)
        return {"file": getattr(module, "__file__", None), "error": None}
    except BaseException as exc:  # noqa: BLE001 - any failure of user code becomes one line
        message = str(exc).splitlines()[0] if str(exc) else ""
        return {"file": None, "error": f"{type(exc).__name__}: {message}".rstrip(": ")}


def probe(package, do_import=False):
    # `python -c` puts the current directory first; a launched server (vllm serve) does not.
    path_entries = [p for i, p in enumerate(sys.path) if not (i == 0 and p == "")]
    sys.path[:] = path_entries
    return _facts(package, path_entries, do_import)


def probe_here(package):
    """The same facts for *this* running interpreter, without a process: sys.path without the entry the
    launcher put first (a script's directory, or the current directory for -m), as a fresh
    `python -c` sees it once the probe dropped its ''. sys.path is put back afterwards."""
    saved = list(sys.path)
    skip_first = not getattr(sys.flags, "safe_path", False) and saved and not _is_site_entry(saved[0])
    path_entries = saved[1:] if skip_first else saved
    try:
        sys.path[:] = path_entries
        return _facts(package, path_entries, False)
    finally:
        sys.path[:] = saved


def _is_site_entry(entry):
    return entry.endswith(("site-packages", "dist-packages")) or entry.endswith(".zip")


def _facts(package, path_entries, do_import):
    site_dirs = _site_dirs()
    facts = {
        "package": package,
        "python": sys.executable,
        "python_version": "%d.%d.%d" % sys.version_info[:3],
        "prefix": sys.prefix,
        "cwd": os.getcwd(),
        "sys_path": path_entries,
        "pythonpath": [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p],
        "site_dirs": site_dirs,
        "spec": None,
        "spec_error": None,
    }
    try:
        spec = importlib.util.find_spec(package)
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
    facts["copies"] = _copies(top, path_entries)
    facts["distributions"] = _distributions(top)
    facts["pth_files"] = _pth_files(site_dirs)
    facts["editable_finders"] = _editable_finders(site_dirs, top)
    facts["import"] = _real_import(package) if do_import else None
    return facts


def main(argv):
    package = argv[0]
    facts = probe(package, do_import="--import" in argv[1:])
    sys.stdout.write(MARKER + json.dumps(facts) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
