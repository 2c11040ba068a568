"""PEP 440 on the standard library: a release's order (``release_key``), its normal form, ``>=`` and a
specifier's membership, as ``packaging`` decides them (tests/core/test_core_verdict.py and
test_normal_form.py check against packaging). The guard, records and locks run on the stdlib only."""

from __future__ import annotations

import re
from typing import Optional

_VERSION_PATTERN = (
    r"v?(?:(\d+)!)?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|c|rc|alpha|beta|pre|preview)[-_.]?(\d*))?"
    r"(?:[-_.]?(?:post|rev|r)[-_.]?(\d*))?(?:[-_.]?dev[-_.]?(\d*))?(?:\+.*)?"
)
_PRE = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}


def _parse(text: str) -> tuple:
    """(epoch, release numbers as written, pre, pre number, post, dev) of a PEP 440 version."""
    text = text.strip()
    if text.replace(".", "").isdecimal() and ".." not in text and text[0] != "." and text[-1] != ".":
        return None, [int(x) for x in text.split(".")], None, None, None, None  # a plain release, no grammar
    m = re.fullmatch(_VERSION_PATTERN, text, re.IGNORECASE)  # compiled on first use (re's cache), not at import
    if not m:
        raise ValueError(f"not a PEP 440 version: {text!r}")
    epoch, release, pre, pre_n, post, dev = m.groups()
    return epoch, [int(x) for x in release.split(".")], pre, pre_n, post, dev


_FULL_PATTERN = (  # PEP 440's public and local grammar, every spelling it permits, for its normal form
    r"v?(?:(?P<epoch>\d+)!)?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre_n>\d+)?)?"
    r"(?:-(?P<post_implicit>\d+)|[-_.]?(?:post|rev|r)[-_.]?(?P<post>\d+)?(?P<post_mark>))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev>\d+)?(?P<dev_mark>))?"
    r"(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?"
)
_PRE_NORMAL = {"a": "a", "alpha": "a", "b": "b", "beta": "b", "c": "rc", "rc": "rc", "pre": "rc", "preview": "rc"}


def normal_form(text: str) -> Optional[str]:
    """PEP 440's normal form of ``text`` (what ``str(packaging.version.Version(text))`` gives), None when it
    is not a version: the stdlib rule a checkout's derived version is written in (install/version.py),
    so the guard derives the very string `hotfix status` shows. Kept honest against packaging by
    tests/core/test_normal_form.py."""
    m = re.fullmatch(_FULL_PATTERN, text.strip(), re.IGNORECASE)
    if m is None:
        return None
    out = f"{int(m['epoch'])}!" if m["epoch"] and int(m["epoch"]) else ""
    out += ".".join(str(int(x)) for x in m["release"].split("."))
    if m["pre"]:
        out += f"{_PRE_NORMAL[m['pre'].lower()]}{int(m['pre_n'] or 0)}"
    if m["post_implicit"] is not None:
        out += f".post{int(m['post_implicit'])}"
    elif m["post_mark"] is not None:
        out += f".post{int(m['post'] or 0)}"
    if m["dev_mark"] is not None:
        out += f".dev{int(m['dev'] or 0)}"
    if m["local"]:
        parts = re.split(r"[-_.]", m["local"])
        out += "+" + ".".join(str(int(x)) if x.isdigit() else x.lower() for x in parts)
    return out


def release_key(text: str) -> tuple:
    """The sort key of a release's PEP 440 version (stdlib; packaging's order): ``release_key(a) <
    release_key(b)`` when release a comes before b. A hotfix's own versions: catalog/index.hotfix_version_key."""
    epoch, numbers, pre, pre_n, post, dev = _parse(text)
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    if pre:
        pre_key = (_PRE[pre.lower()], int(pre_n or 0))
    elif dev is not None and post is None:
        pre_key = (-1, 0)  # 1.0.dev1 sorts before 1.0a1
    else:
        pre_key = (3, 0)
    post_key = int(post or 0) if post is not None else -1
    dev_key = int(dev or 0) if dev is not None else float("inf")
    return (int(epoch or 0), tuple(numbers), pre_key, post_key, dev_key)


def _is_pre(key: tuple) -> bool:
    return key[2] != (3, 0) or key[4] != float("inf")  # a pre- or dev-release


def _prefix_match(version: str, prefix_text: str) -> bool:
    """``version == prefix.*``: release segments compared with zero padding, as PEP 440 says."""
    epoch, have, *_ = _parse(version)
    wanted_epoch, prefix, *_ = _parse(prefix_text)
    have = have + [0] * (len(prefix) - len(have))
    return int(epoch or 0) == int(wanted_epoch or 0) and have[:len(prefix)] == prefix


def version_at_least(version: str, minimum: str) -> bool:
    """PEP 440 ``version >= minimum`` (local labels ignored); False when either cannot be parsed."""
    try:
        return release_key(version) >= release_key(minimum)
    except ValueError:
        return False


def same_release(a: Optional[str], b: Optional[str]) -> bool:
    """Whether two recorded versions name the same release (None matches nothing but None)."""
    if a is None or b is None:
        return a == b
    try:
        return release_key(a) == release_key(b)
    except ValueError:
        return a == b


_CLAUSE_PATTERN = r"\s*(===|==|!=|~=|<=|>=|<|>)\s*([^\s,]+)\s*"


def version_in(version: str, specifier: str) -> bool:
    """PEP 440 ``version in specifier`` for the clauses manifests use (pre-releases match, as in
    manifests); an unparsable clause does not exclude (the catalog validated it with `packaging`).
    Checked against `packaging` by tests/core/test_core_verdict.py."""
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        m = re.fullmatch(_CLAUSE_PATTERN, clause)
        if not m:
            continue
        op, wanted = m.groups()
        try:
            if wanted.endswith(".*"):
                ok = _prefix_match(version, wanted[:-2])
                ok = ok if op == "==" else not ok
            else:
                have, want = release_key(version), release_key(wanted)
                same_base = have[:2] == want[:2]
                if op == "~=":  # >= V and == V's release without its last number (V's suffixes dropped)
                    epoch, numbers, *_ = _parse(wanted)
                    prefix = f"{epoch}!" * bool(epoch) + ".".join(map(str, numbers[:-1]))
                    ok = have >= want and _prefix_match(version, prefix)
                elif op == "<":  # not a pre-release of the version named, unless it is one itself
                    if _is_pre(want):
                        ok = have < want
                    elif want[3] >= 0:  # V.postN: only its own dev-releases are its pre-releases
                        ok = have < want and have[:4] != want[:4]
                    else:
                        ok = have < want and not (same_base and _is_pre(have))
                elif op == ">":  # not a post-release of the version named (its pre segment's), unless it is one
                    ok = have > want and not (same_base and want[3] < 0 and want[4] == float("inf")
                                              and have[2] == want[2])
                else:
                    ok = {"==": have == want, "===": have == want, "!=": have != want, "<=": have <= want,
                          ">=": have >= want}[op]
        except ValueError:
            continue
        if not ok:
            return False
    return True


_LOWER_BOUNDS = (">=", "==", "===", "~=")


def fixed_in_sets(fixed_in: str) -> tuple[str, ...]:
    """A ``fixed_in`` as its union of specifier sets (``">=0.23.0,<0.24.0rc1 || >=0.25.1rc1"``: the releases
    that contain the fix); a bare version ``V`` is the one set ``>=V`` (every release from V on). ValueError
    (its message names what is wrong) when a set is empty, a clause is not PEP 440, or a set has no lower
    bound (>=, ==, ~=): a fix is in a release from some release on, never "every release before"."""
    text = fixed_in.strip()
    if not text:
        raise ValueError("empty")
    if "||" not in text and not re.match(r"\s*[<>=!~]", text):
        release_key(text)  # raises: not a PEP 440 version
        return (f">={text}",)
    sets = []
    for part in (p.strip() for p in text.split("||")):
        clauses = [c.strip() for c in part.split(",")]
        if not part or not all(clauses):
            raise ValueError(f"an empty specifier set or clause in {text!r}")
        lower = False
        for clause in clauses:
            m = re.fullmatch(_CLAUSE_PATTERN, clause)
            if not m:
                raise ValueError(f"not a PEP 440 specifier: {clause!r}")
            op, wanted = m.groups()
            wildcard = wanted.endswith(".*")
            if wildcard and op not in ("==", "!="):
                raise ValueError(f"a wildcard only goes with == or !=: {clause!r}")
            numbers = _parse(wanted[:-2] if wildcard else wanted)[1]  # raises: not a PEP 440 version
            if op == "~=" and len(numbers) < 2:
                raise ValueError(f"~= needs at least two release numbers: {clause!r}")
            lower = lower or (op in _LOWER_BOUNDS and not wildcard)
        if not lower:
            raise ValueError(f"{part!r} has no lower bound (>=, == or ~=)")
        sets.append(",".join(clauses))
    return tuple(sets)


def fixed_by(version: str, fixed_in: str) -> bool:
    """THE rule "is release ``version`` fixed by ``fixed_in``": in one of its specifier sets (``fixed_in_sets``;
    a bare version V: ``version >= V``), pre-releases matching as for an installed release (pip's
    ``installed=True``). False when either cannot be parsed. Every reader calls it: the catalog
    (catalog/model.Manifest.is_fixed_in), locks and records (core/verdict.release_rule), the lock's baseline
    check (txn/hotfix_lock). Checked against ``packaging.specifiers.SpecifierSet`` by tests/core/test_fixed_in.py."""
    try:
        release_key(version)
        sets = fixed_in_sets(fixed_in)
    except ValueError:
        return False
    return any(version_in(version, spec) for spec in sets)


def fixed_in_first(fixed_in: str) -> Optional[str]:
    """The lowest release a ``fixed_in`` names as fixed: the lowest of its sets' lower bounds (each set's
    highest ``>=`` / ``==`` / ``~=``). What a reader that needs one release ("the release that ships it",
    "upgrade to") shows; the union itself decides (``fixed_by``). None when ``fixed_in`` is not valid."""
    try:
        sets = fixed_in_sets(fixed_in)
    except ValueError:
        return None
    bounds = []
    for spec in sets:
        lows = [m.group(2) for m in (re.fullmatch(_CLAUSE_PATTERN, c) for c in spec.split(","))
                if m.group(1) in _LOWER_BOUNDS and not m.group(2).endswith(".*")]
        bounds.append(max(lows, key=release_key))
    return min(bounds, key=release_key)
