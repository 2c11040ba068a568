"""core.policytoml, the trust policy's reader on every Python: the same values as tomllib for documents in
its subset, and a refusal (never another reading) for the rest of TOML."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_hotfix_guard.core.policytoml import loads
from vllm_hotfix_guard.errors import InvalidInput

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

POLICY = '''# the release team's policy
version = 3
threshold = 2              # signatures needed from distinct keys
min_version = 7
expired = "warn"
grace = '72h'
catalogs = "signed"

[[keys]]
name = "release-team"
minisign = "RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3"
[[ keys ]]
name = "sre-\\u00e9"
minisign = "RWQ\\"x\\\\"  # escapes
'''


def test_a_policy_reads_as_tomllib_reads_it():
    assert loads(POLICY, "trust.toml") == tomllib.loads(POLICY)


@pytest.mark.parametrize("text", [
    "a.b = 1", '"quoted" = 1', "[table]\nx = 1", "x = [1, 2]", "x = {a = 1}", "x = 1.5", "x = 0x10",
    "x = 1979-05-27", 'x = """multi\nline"""', "x = 007", "x = 1__0", "x = _1", "x = truex", "x",
    'x = "unterminated', "x = 1\nx = 2", "x = 1 2", "x = 1\n[[x]]", "[[a.b]]", "x = \"\\q\"",
    "x = 99999999999999999999", "x = 'a' 'b'",
])
def test_outside_the_subset_or_invalid_is_refused_with_its_line(text):
    with pytest.raises(InvalidInput, match=r"trust\.toml: line \d+"):
        loads(text, "trust.toml")


_key = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-0123456789", min_size=1, max_size=12)
_scalar = st.one_of(st.integers(min_value=-10 ** 17, max_value=10 ** 17), st.booleans(),
                    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=20))


def _render(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:_}" if abs(value) > 1000 and value % 7 == 0 else str(value)
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


@settings(max_examples=200, deadline=None)
@given(top=st.dictionaries(_key, _scalar, max_size=5),
       tables=st.lists(st.dictionaries(_key, _scalar, max_size=3), max_size=3),
       comment=st.booleans())
def test_generated_documents_read_as_tomllib_reads_them(top, tables, comment):
    tail = "  # note" if comment else ""
    lines = [f"{k} = {_render(v)}{tail}" for k, v in top.items() if k != "keys"]
    for table in tables:
        lines.append("[[keys]]")
        lines += [f"{k} = {_render(v)}" for k, v in table.items()]
    text = "\n".join(lines) + "\n"
    assert loads(text, "p.toml") == tomllib.loads(text)
