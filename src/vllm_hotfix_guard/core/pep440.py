"""PEP 440 on the standard library: a release's order (``release_key``), its normal form, ``>=``, "the same
release" (``same_release``) and "the same hotfix version" (``same_version``), a specifier's membership
(``version_in``, ``range_takes``), as ``packaging`` decides them (tests/core/test_core_verdict.py,
test_normal_form.py and test_same_version.py check against packaging). One grammar (``_parse``) reads every
spelling. The guard, records and locks run on the stdlib only; the CLI asks these same functions."""

from __future__ import annotations

import re
from typing import Optional

_VERSION_PATTERN = (  # PEP 440's public and local grammar, every spelling it permits (ASCII digits and letters)
    r"v?(?:(?P<epoch>[0-9]+)!)?(?P<release>[0-9]+(?:\.[0-9]+)*)"
    r"(?:[-_.]?(?P<pre>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre_n>[0-9]+)?)?"
    r"(?:-(?P<post_implicit>[0-9]+)|[-_.]?(?:post|rev|r)[-_.]?(?P<post>[0-9]+)?(?P<post_mark>))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev>[0-9]+)?(?P<dev_mark>))?"
    r"(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?"
)
_PRE_NORMAL = {"a": "a", "alpha": "a", "b": "b", "beta": "b", "c": "rc", "rc": "rc", "pre": "rc", "preview": "rc"}
_PRE_RANK = {"a": 0, "b": 1, "rc": 2}


def _match(text: str):
    """``text`` (stripped) against PEP 440's grammar as packaging reads it, or None: ASCII only (``re.ASCII``:
    no other script's digits, no letter that folds to an ASCII one). Compiled on first use (re's cache)."""
    return re.fullmatch(_VERSION_PATTERN, text.strip(), re.IGNORECASE | re.ASCII)


def _parse(text: str) -> tuple:
    """(epoch, release numbers as written, pre as (a | b | rc, number) or None, post, dev (int or None), local
    label's normal form or '') of a PEP 440 version; ValueError when it is not one. One grammar for every
    reader here: normal_form, release_key, same_release, same_version, version_in. A version written in
    normal form (what metadata holds: 0.30.0, 0.23.0rc1, 0.30.1.dev3+g02c7db4c5) is read without it."""
    text = text.strip()
    parts = _normal_parts(text)
    return parts if parts is not None else _grammar_parts(text)


def _grammar_parts(text: str) -> tuple:
    m = _match(text)
    if not m:
        raise ValueError(f"not a PEP 440 version: {text!r}")
    pre = (_PRE_NORMAL[m["pre"].lower()], int(m["pre_n"] or 0)) if m["pre"] else None
    if m["post_implicit"] is not None:  # 1.0-1 is 1.0.post1
        post = int(m["post_implicit"])
    else:
        post = int(m["post"] or 0) if m["post_mark"] is not None else None
    dev = int(m["dev"] or 0) if m["dev_mark"] is not None else None
    return int(m["epoch"] or 0), _numbers(m["release"]), pre, post, dev, _local(m["local"] or "")


def _normal_parts(text: str) -> Optional[tuple]:
    """``_grammar_parts`` of a version in normal form without an epoch (``R[{a|b|rc}N][.postN][.devN][+L]``,
    ASCII), read with str methods, or None (ask the grammar): the guard reads the installed release in every
    process, and compiling the grammar costs it about 0.3 ms (tests/core/test_same_version.py: the same parts)."""
    if not text.isascii():
        return None
    public, plus, local = text.partition("+")
    if plus and not all(x.isalnum() for x in local.split(".")):
        return None
    public, dev = _suffix(public, ".dev")
    public, post = _suffix(public, ".post")
    cut = next((i for i, c in enumerate(public) if c.isalpha()), len(public))
    release, tail, pre = public[:cut], public[cut:], None
    if tail:
        kind = next((k for k in ("rc", "a", "b") if tail.startswith(k) and tail[len(k):].isdecimal()), None)
        if kind is None:
            return None
        pre = (kind, int(tail[len(kind):]))
    if "" in (dev, post) or not release.replace(".", "").isdecimal() or "" in release.split("."):
        return None
    return 0, _numbers(release), pre, None if post is None else int(post), None if dev is None else int(dev), \
        _local(local)


def _suffix(text: str, mark: str) -> tuple:
    """(text without ``mark``N at its end, N: None without one, '' when N is not a number)."""
    head, found, number = text.rpartition(mark)
    if not found:
        return text, None
    return head, number if number.isdecimal() else ""


def _numbers(release: str) -> list:
    return [int(x) for x in release.split(".")]


def _local(label: str) -> str:
    """A local label's normal form (``A-01_x`` -> ``a.1.x``), '' for none."""
    if not label:
        return ""
    return ".".join(str(int(x)) if x.isdigit() else x.lower() for x in label.replace("-", ".").replace("_", ".").split("."))


def normal_form(text: str) -> Optional[str]:
    """PEP 440's normal form of ``text`` (what ``str(packaging.version.Version(text))`` gives), None when it
    is not a version: the stdlib rule a checkout's derived version is written in (install/version.py),
    so the guard derives the very string `hotfix status` shows. Kept honest against packaging by
    tests/core/test_normal_form.py."""
    try:
        epoch, numbers, pre, post, dev, local = _parse(text)
    except ValueError:
        return None
    out = f"{epoch}!" if epoch else ""
    out += ".".join(map(str, numbers))
    out += f"{pre[0]}{pre[1]}" if pre else ""
    out += f".post{post}" if post is not None else ""
    out += f".dev{dev}" if dev is not None else ""
    return out + (f"+{local}" if local else "")


def release_key(text: str) -> tuple:
    """The sort key of a release's PEP 440 version (stdlib; packaging's order), its local label left out (a
    local label names a build of the same release): ``release_key(a) < release_key(b)`` when release a comes
    before b. A hotfix's own versions: catalog/index.hotfix_version_key, compared by same_version."""
    return _key(_parse(text))


def _key(parts: tuple) -> tuple:
    epoch, numbers, pre, post, dev, _local = parts
    numbers = list(numbers)
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    if pre:
        pre_key = (_PRE_RANK[pre[0]], pre[1])
    elif dev is not None and post is None:
        pre_key = (-1, 0)  # 1.0.dev1 sorts before 1.0a1
    else:
        pre_key = (3, 0)
    post_key = post if post is not None else -1
    dev_key = dev if dev is not None else float("inf")
    return (epoch, tuple(numbers), pre_key, post_key, dev_key)


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
    """Whether two recorded releases name the same release (None matches nothing but None): equal as PEP 440
    versions, a local label left out (``0.30.0+cu126`` is a build of 0.30.0: tests/test_hotfix_lock.py), or
    equal as written when either is not PEP 440."""
    if a is None or b is None:
        return a == b
    try:
        return release_key(a) == release_key(b)
    except ValueError:
        return a == b


def same_version(a, b) -> bool:
    """THE rule "is this the same hotfix version" (a manifest's ``version``, a record's or a lock's: an int or a
    string), for the CLI (catalog/index.same_version) and the guard's catalog pin (pins.py) alike: equal as
    written, or equal as PEP 440 versions the way ``packaging.version.Version`` compares them (``1`` is ``1.0``,
    ``1.0-1`` is ``1.0.post1``), local labels included (``1.0+a`` is not ``1.0+b``: the catalog keeps those as
    two versions of a hotfix, catalog/index.hotfix_version_key). None or a bool (a manifest without a version,
    TOML's ``true``) is no version. Checked against packaging by tests/core/test_same_version.py."""
    if a is None or b is None or isinstance(a, bool) or isinstance(b, bool):
        return False
    a, b = str(a), str(b)
    if a == b:
        return True
    try:
        parts_a, parts_b = _parse(a), _parse(b)
    except ValueError:
        return False
    return _key(parts_a) == _key(parts_b) and parts_a[5] == parts_b[5]


_CLAUSE_PATTERN = r"\s*(===|==|!=|~=|<=|>=|<|>)\s*([^\s,]+)\s*"


def version_in(version: str, specifier: str) -> bool:
    """THE rule "is release ``version`` in the specifier set ``specifier``" (a manifest target's or patch's
    ``versions``, a lock's, a record's), as ``packaging``'s ``SpecifierSet(specifier).contains(version,
    prereleases=True)`` decides it: pre-releases match (0.30.0rc2 is in ``>=0.30.0rc1,<=0.30.0rc2``), a local
    label counts only against a clause that names one (``==0.30.0`` holds ``0.30.0+cu128``; ``==0.30.0+cu128``
    holds no other build), ``===`` compares the string as written (case aside). A version that is not PEP 440
    is in no range but the empty one. An unparsable clause does not exclude (the catalog validated it with
    `packaging`). The CLI's catalog/model.in_range and the guard call it; checked against `packaging` by
    tests/core/test_core_verdict.py and tests/core/test_same_version.py."""
    try:
        parts = _parse(version)
    except ValueError:
        parts = None
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        m = re.fullmatch(_CLAUSE_PATTERN, clause)
        if not m:
            continue
        op, wanted = m.groups()
        if op == "===":  # arbitrary equality: the string itself
            if version.lower() != wanted.lower():
                return False
            continue
        if parts is None:
            return False
        try:
            ok = _clause_holds(op, wanted, version, parts)
        except ValueError:
            continue
        if not ok:
            return False
    return True


def range_takes(versions: Optional[str], release: Optional[str]) -> bool:
    """THE rule "does the range ``versions`` (a manifest target's or patch's) take release ``release``": no range
    takes every release, an unknown release (None) only that; a range takes the releases in it (version_in).
    The CLI's choice of patches and target (catalog/model.in_range: Manifest.patches_for, TargetSpec.contains)
    and the guard's catalog pin (pins.py) call it."""
    if versions is None:
        return True
    return release is not None and version_in(release, versions)


def _clause_holds(op: str, wanted: str, version: str, parts: tuple) -> bool:
    """One clause ``op wanted`` (not ``===``) on ``version`` (its ``_parse`` parts); ValueError: ``wanted``
    is not PEP 440."""
    if wanted.endswith(".*"):
        ok = _prefix_match(version, wanted[:-2])
        return ok if op == "==" else not ok
    wanted_parts = _parse(wanted)
    have, want = _key(parts), _key(wanted_parts)
    same_base = have[:2] == want[:2]
    if op == "~=":  # >= V and == V's release without its last number (V's suffixes dropped)
        epoch, numbers = wanted_parts[:2]
        prefix = f"{epoch}!" * bool(epoch) + ".".join(map(str, numbers[:-1]))
        return have >= want and _prefix_match(version, prefix)
    if op == "<":  # not a pre-release of the version named, unless it is one itself
        if _is_pre(want):
            return have < want
        if want[3] >= 0:  # V.postN: only its own dev-releases are its pre-releases
            return have < want and have[:4] != want[:4]
        return have < want and not (same_base and _is_pre(have))
    if op == ">":  # not a post-release of the version named (its pre segment's), unless it is one
        return have > want and not (same_base and want[3] < 0 and want[4] == float("inf") and have[2] == want[2])
    if op in ("==", "!="):  # a local label counts where the clause names one
        equal = have == want and (not wanted_parts[5] or parts[5] == wanted_parts[5])
        return equal if op == "==" else not equal
    return {"<=": have <= want, ">=": have >= want}[op]


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
