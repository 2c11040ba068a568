import base64
import hashlib

import pytest

from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix.install import record


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


FILES = {"pkg/__init__.py": b"x = 1\n", "pkg/a,b.py": b"comma\n", "pkg/data.bin": bytes(range(256)) * 9000}


@pytest.fixture
def site(tmp_path):
    """A site-packages with pkg/ and a RECORD written the way pip writes it (csv, quoted paths)."""
    site = tmp_path / "site-packages"
    rows = []
    for rel, data in FILES.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
        path = f'"{rel}"' if "," in rel else rel
        rows.append(f"{path},{_hash(data)},{len(data)}")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "tool").write_bytes(b"#!/bin/sh\n")
    rows.append(f"../bin/tool,{_hash(b'#!/bin/sh' + bytes([10]))},10")
    rows.append("pkg-1.0.dist-info/RECORD,,")
    (site / "pkg-1.0.dist-info").mkdir()
    (site / "pkg-1.0.dist-info" / "RECORD").write_text("\n".join(rows) + "\n")
    (site / "pkg" / "__pycache__").mkdir()
    (site / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"cache")
    return site


def test_read_record_handles_quotes_unhashed_entries_and_scripts_outside(site):
    entries = record.read_record(site / "pkg-1.0.dist-info")
    assert set(entries) == {*FILES, "../bin/tool", "pkg-1.0.dist-info/RECORD"}
    assert entries["pkg-1.0.dist-info/RECORD"].algorithm is None
    assert entries["pkg/a,b.py"].size == 6


@pytest.mark.parametrize("text, where", [
    ("pkg/x.py,sha256=abc\n", "RECORD:1: expected 3"),
    ("pkg/ok.py,,\npkg/x.py,md99=abc,3\n", "RECORD:2: bad hash"),
    ("pkg/x.py,sha256=abc,big\n", "RECORD:1: bad size"),
])
def test_malformed_record_names_the_line(text, where):
    with pytest.raises(InvalidInput, match=where):
        record.parse_record(text, source="RECORD")


def test_verify_exactly_the_given_paths(site):
    entries = record.read_record(site / "pkg-1.0.dist-info")
    assert record.verify(site, entries, ["pkg/__init__.py", "pkg/created.py", "../bin/tool"]) == []
    (site / "pkg" / "__init__.py").write_bytes(b"x = 2\n")        # same size, other bytes
    (site / "pkg" / "data.bin").write_bytes(b"short")
    (site / "pkg" / "a,b.py").unlink()
    (site / "pkg" / "stray.py").write_text("1\n")
    found = {d.path: d for d in record.verify(site, entries, [*FILES, "pkg/stray.py"])}
    assert found["pkg/__init__.py"].kind == "digest" and found["pkg/__init__.py"].flags == "..5......"
    assert found["pkg/data.bin"].kind == "size" and found["pkg/data.bin"].actual == "5"
    assert found["pkg/a,b.py"].kind == "missing"
    assert found["pkg/stray.py"].kind == "unrecorded"


def test_audit_reports_differences_and_unrecorded_but_not_import_caches(site):
    entries = record.read_record(site / "pkg-1.0.dist-info")
    report = record.audit(site, entries, workers=3)
    assert report.pristine and report.files_checked == 5
    assert report.bytes == sum(map(len, FILES.values())) + 10
    (site / "pkg" / "data.bin").write_bytes(FILES["pkg/data.bin"][:-1] + b"!")
    (site / "pkg" / "__pycache__" / "notes.txt").write_text("?")
    (site / "pkg" / "sub").mkdir()
    (site / "pkg" / "sub" / "evil.py").write_text("import os\n")
    ticks = []
    report = record.audit(site, entries, workers=2, progress=lambda it, n: (ticks.append(n) or t for t in it))
    assert [(d.path, d.kind) for d in report.differences] == [
        ("pkg/__pycache__/notes.txt", "unrecorded"), ("pkg/data.bin", "digest"), ("pkg/sub/evil.py", "unrecorded")]
    assert ticks[0] == 5
