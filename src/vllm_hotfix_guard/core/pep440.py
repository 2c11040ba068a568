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
                if op == "~=":
                    ok = have >= want and _prefix_match(version, ".".join(wanted.split(".")[:-1]))
                elif op == "<":  # not a pre-release of the version named, unless it is one itself
                    ok = have < want and not (same_base and _is_pre(have) and not _is_pre(want))
                elif op == ">":  # not a post-release of the version named, unless it is one itself
                    ok = have > want and not (same_base and have[3] >= 0 and want[3] < 0)
                else:
                    ok = {"==": have == want, "===": have == want, "!=": have != want, "<=": have <= want,
                          ">=": have >= want}[op]
        except ValueError:
            continue
        if not ok:
            return False
    return True
