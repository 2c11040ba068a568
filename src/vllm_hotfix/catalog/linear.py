"""The linear-time rule for catalog patterns: what a ``[[signatures]]`` pattern may use so that Python's
``re`` (the fallback where ``google-re2`` has no wheel) matches it without backtracking blow-up, checked on
every platform alike when a manifest loads (``linear_time_problem``: None, or why not, for the key-path
error ``catalog.signatures`` raises). Pure: the stdlib regex parser only."""

from __future__ import annotations

import re
from typing import Any

try:  # the regex parser of the stdlib
    from re import _parser as _sre_parse  # type: ignore[attr-defined]  # python >= 3.11
except ImportError:  # pragma: no cover - python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]

_UNBOUNDED = _sre_parse.MAXREPEAT
_NOT_LINEAR = {"ASSERT": "a lookahead / lookbehind", "ASSERT_NOT": "a negative lookahead / lookbehind",
               "GROUPREF": "a back-reference", "GROUPREF_EXISTS": "a conditional group",
               "ATOMIC_GROUP": "an atomic group", "POSSESSIVE_REPEAT": "a possessive quantifier"}
_REPEATS = ("MAX_REPEAT", "MIN_REPEAT")
WIDE = 100  # a repeat whose count may vary by more than this is "wide": a backtracking engine tries each count
LITERAL_FOLLOWER = 8  # a wide repeat followed by a literal this long that cannot overlap itself is cheap
NARROW_BUDGET = 256  # the product of the counts narrow ambiguous repeats may take (n 'x?' before n 'x': 2**n)


def linear_time_problem(pattern: str) -> str | None:
    """Why ``pattern`` may take more than (about) quadratic time in a backtracking engine, or None.

    Refused everywhere, whichever engine is installed (so a catalog valid on one platform is valid on
    all): the constructs RE2 does not have (lookarounds, back-references, conditionals, atomic groups,
    possessive quantifiers); an ambiguous nested repetition -- inside a part repeated more than once,
    another repetition of varying count (``(a+)+``, ``(.*a){12}``), something that can match nothing
    (``(a?)*``) or alternatives that can begin alike (``(x|x)*y``, ``(x|xx)+y``) -- which backtracks
    exponentially in Python's ``re``; and more than one wide repeat that can also match what follows it
    (``a.*a.*b``, ``\\w+\\s?\\w+x``: polynomial of that degree on an 8 KB line). A wide repeat followed by a
    literal of at least ``LITERAL_FOLLOWER`` characters that cannot overlap itself (``.*MMU Fault``) is
    tried only where that literal occurs; two such are allowed when the pattern itself starts with one.
    docs/catalog.md lists what a catalog pattern may use."""
    try:
        parsed = _sre_parse.parse(pattern)
    except (re.error, ValueError):
        return None  # the caller reports the syntax error
    sets = _CharSets(bool(parsed.state.flags & re.IGNORECASE))
    items = list(parsed)
    problem = _nested_problem(items, sets)
    if problem:
        return problem
    ambiguous, cheap, narrow = _wide_overlaps(items, (frozenset(), ""), sets)
    if narrow > NARROW_BUDGET:
        return (f"optional or bounded repeats ('x?', 'a{{0,5}}') that can also match what follows them multiply "
                f"the splits a backtracking engine tries ({narrow} here, at most {NARROW_BUDGET}): like "
                "'x?x?x?xxx', it takes exponential time; make them unambiguous or fewer")
    starts_with_literal = _literal_prefix(items) is not None and len(_literal_prefix(items)) >= LITERAL_FOLLOWER
    if ambiguous + cheap > 1 and not (ambiguous == 0 and cheap == 2 and starts_with_literal):
        return ("more than one wide repeat ('.*', '\\w+', '[^,]*') that can also match what follows it: a "
                "backtracking engine tries every split of the line between them; keep one, or follow each by a "
                f"literal of at least {LITERAL_FOLLOWER} characters")
    return None


def _nested_problem(items: list, sets: "_CharSets", repeated: bool = False) -> str | None:
    """The constructs refused anywhere, and (``repeated``: inside a part repeated more than once) an
    ambiguous nested repetition."""
    for op, arg in items:
        name = str(op)
        if name in _NOT_LINEAR:
            return f"{_NOT_LINEAR[name]} is not allowed (RE2 syntax: doctor matches in linear time)"
        if name in _REPEATS:
            low, high, body = arg
            if repeated and low != high:
                return ("a repetition of varying count inside another repetition (like '(a+)+' or '(.*a){12}') is "
                        "not allowed: it backtracks exponentially; repeat the inner part once")
            if high > 1 and _first(list(body), sets)[1]:
                return "a repetition of something that can match nothing (like '(a?)*') is not allowed"
            problem = _nested_problem(list(body), sets, repeated or high > 1)
        elif name == "SUBPATTERN":
            problem = _nested_problem(list(arg[-1]), sets, repeated)
        elif name == "BRANCH":
            alternatives = [list(a) for a in arg[1]]
            if repeated:
                seen: set[int] = set()
                for alternative in alternatives:
                    first, empty = _first(alternative, sets)
                    if empty or first & seen:
                        return ("alternatives that can begin alike (like '(x|x)*' or '(x|xx)+') inside a repetition "
                                "are not allowed: they backtrack exponentially")
                    seen |= first
            problem = next((p for p in (_nested_problem(a, sets, repeated) for a in alternatives) if p), None)
        else:
            problem = None
        if problem:
            return problem
    return None


def _wide_overlaps(items: list, follow: tuple[frozenset, str], sets: "_CharSets") -> tuple[int, int, int]:
    """(wide repeats that can match the first character of what follows them, those of them followed by a
    long literal that cannot overlap itself, the product of the counts each narrow repeat that can match
    what follows it may take) in ``items``; ``follow``: the first characters of what comes after
    ``items`` and the literal it starts with."""
    ambiguous = cheap = 0
    narrow = 1
    for index, (op, arg) in enumerate(items):
        name = str(op)
        after = _follow(items[index + 1:], follow, sets)
        if name in _REPEATS:
            low, high, body = arg
            overlaps = bool(sets.consumed(list(body)) & after[0])
            if (high == _UNBOUNDED or high - low > WIDE) and overlaps:
                if len(after[1]) >= LITERAL_FOLLOWER and _border_free(after[1]):
                    cheap += 1
                else:
                    ambiguous += 1
            elif overlaps and high != low:
                narrow *= high - low + 1
            inner = _wide_overlaps(list(body), after, sets)
        elif name == "SUBPATTERN":
            inner = _wide_overlaps(list(arg[-1]), after, sets)
        elif name == "BRANCH":
            counts = [_wide_overlaps(list(a), after, sets) for a in arg[1]]
            inner = (sum(c[0] for c in counts), sum(c[1] for c in counts), sum(c[2] for c in counts))
        else:
            continue
        ambiguous, cheap, narrow = ambiguous + inner[0], cheap + inner[1], narrow * inner[2]
    return ambiguous, cheap, narrow


def _follow(rest: list, outer: tuple[frozenset, str], sets: "_CharSets") -> tuple[frozenset, str]:
    """The first characters of ``rest`` followed by what follows it (``outer``), and its literal prefix."""
    first, empty = _first(rest, sets)
    prefix = _literal_prefix(rest)
    if empty:
        first = first | outer[0]
        if prefix is not None and prefix == _literal_prefix(rest, whole=True):
            prefix += outer[1]
    return frozenset(first), prefix or ""


def _literal_prefix(items: list, *, whole: bool = False) -> str | None:
    """The case-sensitive literal text ``items`` starts with (zero-width assertions skipped); with
    ``whole``, only when ``items`` is nothing but that text."""
    text = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            text.append(chr(arg))
        elif name == "AT":
            continue
        elif whole:
            return None
        else:
            break
    return "".join(text) if text or whole else None


def _border_free(text: str) -> bool:
    """No proper prefix of ``text`` is also its suffix: two occurrences can never overlap."""
    return all(text[:n] != text[-n:] for n in range(1, len(text)))


def _first(items: list, sets: "_CharSets") -> tuple[set[int], bool]:
    """(the characters a match of ``items`` can begin with, whether it can match nothing)."""
    found: set[int] = set()
    for op, arg in items:
        name = str(op)
        one = sets.single(name, arg)
        if one is not None:
            return found | one, False
        if name == "AT":
            continue
        if name == "SUBPATTERN":
            first, empty = _first(list(arg[-1]), sets)
        elif name == "BRANCH":
            results = [_first(list(a), sets) for a in arg[1]]
            first = set().union(*(r[0] for r in results))
            empty = any(r[1] for r in results)
        elif name in _REPEATS:
            first, empty = _first(list(arg[2]), sets)
            empty = empty or arg[0] == 0
        else:  # refused elsewhere; count it as anything
            return found | sets.ALL, False
        found |= first
        if not empty:
            return found, False
    return found, True


class _CharSets:
    """Characters as small ints: ASCII 0-127 and 128 for every other character (conservative: a class
    that holds any non-ASCII character overlaps every other such class)."""

    OTHER = 128
    ALL = frozenset(range(129))
    _CATEGORIES = {
        "CATEGORY_DIGIT": frozenset(range(48, 58)) | {128},
        "CATEGORY_WORD": frozenset([*range(48, 58), *range(65, 91), *range(97, 123), 95, 128]),
        "CATEGORY_SPACE": frozenset([9, 10, 11, 12, 13, 32, 128]),
    }

    def __init__(self, ignore_case: bool):
        self.ignore_case = ignore_case

    def _char(self, code: int) -> set[int]:
        if code >= 128:
            return {self.OTHER}
        chars = {code}
        if self.ignore_case and chr(code).isalpha():
            chars |= {ord(chr(code).lower()), ord(chr(code).upper())}
        return chars

    def _category(self, name: str) -> frozenset:
        if name in self._CATEGORIES:
            return self._CATEGORIES[name]
        positive = self._CATEGORIES.get(name.replace("_NOT_", "_"))
        return (self.ALL - positive) | {self.OTHER} if positive is not None else self.ALL

    def single(self, name: str, arg: Any) -> set[int] | None:
        """The characters one single-character item matches, or None when it is not one."""
        if name == "LITERAL":
            return self._char(arg)
        if name == "NOT_LITERAL":
            return set(self.ALL - self._char(arg)) | {self.OTHER}
        if name == "ANY":
            return set(self.ALL - {10})
        if name != "IN":
            return None
        chars: set[int] = set()
        negate = False
        for kind, value in arg:
            kind = str(kind)
            if kind == "NEGATE":
                negate = True
            elif kind == "LITERAL":
                chars |= self._char(value)
            elif kind == "RANGE":
                for code in range(value[0], min(value[1], 127) + 1):
                    chars |= self._char(code)
                if value[1] >= 128:
                    chars.add(self.OTHER)
            elif kind == "CATEGORY":
                chars |= self._category(str(value))
            else:
                chars |= self.ALL
        return set(self.ALL - chars) | {self.OTHER} if negate else chars

    def consumed(self, items: list) -> set[int]:
        """Every character a match of ``items`` can consume."""
        found: set[int] = set()
        for op, arg in items:
            name = str(op)
            one = self.single(name, arg)
            if one is not None:
                found |= one
            elif name == "SUBPATTERN":
                found |= self.consumed(list(arg[-1]))
            elif name == "BRANCH":
                for alternative in arg[1]:
                    found |= self.consumed(list(alternative))
            elif name in _REPEATS:
                found |= self.consumed(list(arg[2]))
            elif name != "AT":
                found |= self.ALL
        return found
