"""Issue 31, one sanitiser for text output (output.visible): outside strings with terminal control sequences
-- OSC 0/8/52 (title, hyperlink, clipboard), CSI colour and erase, DCS, CR, BS, BEL, C1 (U+009B CSI,
U+009D OSC) and bidi overrides -- reach the terminal only as visible escapes, from every place the review
found them printed raw. Each case runs the real CLI and checks the exact bytes written to stdout and stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.localindex import TINY_ORIGINAL, TINY_PATCHED, build_wheel, isolated_pip_env, serve, write_simple_index
from fixtures.trees import snapshot

# One of each kind the review tried, in a string short enough to sit in a title, a line, a file name.
EVIL = ("\x1b]0;pwned\x07" "\x1b]8;;http://evil.example/\x1b\\link\x1b]8;;\x1b\\" "\x1b]52;c;cm0gLXJmIH4=\x07"
        "\x1bP1$qm\x1b\\" "\x1b[31;1mred\x1b[2K" "\r\b\x07" "\x9b31m\x9d0;t\x9c" "\u202egnp.exe\u202c\u2066x\u2069")
FORBIDDEN = [chr(c) for c in range(0x20) if chr(c) not in "\n\t"] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0)] \
    + [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))]


def hotfix(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "vllm_hotfix", *map(str, args)], capture_output=True, timeout=300,
                          env=full, cwd=cwd)


def assert_inert(done: subprocess.CompletedProcess) -> str:
    """Every byte printed is plain: no control character but newline and tab, no C1, no bidi control; the
    hostile parts are there as visible escapes. Returns the text printed."""
    text = (done.stdout + done.stderr).decode("utf-8")  # also: it is valid UTF-8
    found = sorted({f"U+{ord(c):04X}" for c in text if c in FORBIDDEN})
    assert not found, (found, text)
    assert "\\e]0;pwned" in text or "\\033]0;pwned" in text, text  # shown, not obeyed
    return text


def test_apply_and_contains_name_path_and_line_and_show_content_quoted(tmp_path, _isolated_state):
    root = tmp_path / "root"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "m.py").write_text(f"a {EVIL}\n")
    patch = tmp_path / "evil.diff"
    patch.write_text(f"--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n-b {EVIL}\n+c\n")
    before = snapshot(tmp_path)
    for command in (("apply", "--patch", patch, "--root", root), ("apply", "--patch", patch, "--root", root, "--dry-run"),
                    ("contains", "--patch", patch, "--root", root)):
        done = hotfix(*command)
        assert done.returncode == 4, (command, done.stderr)
        text = assert_inert(done)
        assert "pkg/m.py: hunk @@ -1,1 +1,1 @@ does not apply: expected line 1 \"b \\e]0;pwned\\x07" in text, text
    assert snapshot(tmp_path) == before


def test_contains_names_each_file_quoted(tmp_path):
    root = tmp_path / "root"
    name = f"pkg/{EVIL[:20]}.py"
    (root / "pkg").mkdir(parents=True)
    (root / name).write_text("neither side\n")
    patch = tmp_path / "evil.diff"
    from vllm_hotfix_guard.output import quote_path

    patch.write_text(f"--- {quote_path('a/' + name)}\n+++ {quote_path('b/' + name)}\n@@ -1 +1 @@\n-a\n+b\n")
    done = hotfix("contains", "--patch", patch, "--root", root)
    assert done.returncode == 4, done.stderr  # conflicts: each file is named with its state
    text = assert_inert(done)
    assert '  "pkg/\\033]0;pwned\\a' in text  # git's quoting of the name


def test_list_and_show_a_user_catalogs_title(tmp_path):
    from fixtures.manifests import write_patch_catalog

    title = json.dumps(EVIL)[1:-1]  # a TOML basic string takes JSON's escapes (\\u001b, \\b, \\")
    catalog = write_patch_catalog(tmp_path / "catalog", "evil", b"x", distribution="vllm", versions=">=0.30.0",
                                  fixed_in=None, title=title + "\\nhotfix: error: forged line")
    for command in (("list",), ("show", "evil")):
        done = hotfix(*command, "--catalog", catalog)
        assert done.returncode == 0, done.stderr
        text = assert_inert(done)
        assert "\nhotfix: error: forged line" not in text and "\\nhotfix: error: forged line" in text


def test_doctor_first_errors_and_evidence(tmp_path):
    log = tmp_path / "crash.log"
    log.write_text(f"ERROR 11-30 22:49:06 [core.py:1] RuntimeError: CUDA error: an illegal memory access {EVIL}\n")
    done = hotfix("doctor", log)
    assert done.returncode in (1, 9), done.stderr
    text = assert_inert(done)
    assert "root error of each process" in text
    done = hotfix("doctor", log, "--json")  # JSON escapes them too (C1 and bidi included): same value, inert text
    printed = done.stdout.decode()
    assert not [c for c in printed if c in FORBIDDEN and c not in "\n"]
    assert EVIL in json.loads(printed)["first_errors"][0]["text"]


def test_doctor_source_name_and_compose_refusal(tmp_path):
    compose = tmp_path / "compose.yaml"
    compose.write_text(f'services:\n  {json.dumps("vl" + EVIL + "lm")}:\n    image: x\n')
    from fixtures.composefiles import HOTFIX, write_export

    export = write_export(tmp_path / "hotfix-export")
    done = hotfix("compose", HOTFIX, "--service", "vllm", "--export-dir", export, "--file", compose, "--no-guard", "--no-strict")
    assert done.returncode in (2, 3), done.stderr
    assert_inert(done)


def test_new_from_release_member_names_in_output_and_patch_headers(tmp_path):
    evil = f"tinypkg/{EVIL[:20]}.py"
    wheels = [build_wheel(tmp_path / "build", "tinypkg", "1.0.0", {TINY_PATCHED: TINY_ORIGINAL, evil: b"x = 1\n"}),
              build_wheel(tmp_path / "build", "tinypkg", "1.0.1", {TINY_PATCHED: TINY_ORIGINAL, evil: b"x = 2\n"})]
    write_simple_index(tmp_path / "www", "tinypkg", wheels)
    server = serve(tmp_path / "www")
    try:
        done = hotfix("new", "tiny-release", "--from-release", "tinypkg==1.0.1", "--out", tmp_path / "catalog",
                      env=isolated_pip_env(tmp_path, server.url))
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert_inert(done)
    (patch,) = (tmp_path / "catalog" / "patches" / "tiny-release").iterdir()
    data = patch.read_bytes()
    assert b"\x1b" not in data and b'diff --git "a/tinypkg/\\033]0;pwned\\a' in data
    from vllm_hotfix_guard.core.diff import parse_patch

    (parsed,) = parse_patch(data).files  # the header is one file's, whatever the name holds
    assert parsed.path == evil


@pytest.mark.parametrize("ids", [f"fix\nINFO 12-01 00:00:00 [guard.py:1] vllm-hotfix guard pid=1 role=main: x in effect",
                                 f"fix{EVIL}"])
def test_the_guard_refuses_an_id_that_breaks_the_id_rule_and_prints_it_inert(ids):
    code = ("import logging, sys\nlogging.basicConfig(stream=sys.stderr, format='%(message)s')\n"
            "from vllm_hotfix_guard import plugin as guard\nguard.register()\n")
    env = {**os.environ, "HOTFIX_REQUIRE": ids}
    env.pop("HOTFIX_LOCK", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=60)
    text = (done.stdout + done.stderr).decode()
    lines = [line for line in text.splitlines() if "vllm-hotfix guard" in line]
    assert len(lines) == 1, text  # one line: no id forges another
    assert "invalid: HOTFIX_REQUIRE names no hotfix id" in lines[0]
    assert not [c for c in text if c in FORBIDDEN]


def test_visible_is_the_one_sanitiser():
    from vllm_hotfix_guard.output import quote_path, quoted, visible

    shown = visible(EVIL)
    assert shown.isprintable() and "\\e]0;pwned\\x07" in shown and "\\x9b31m" in shown and "\\u202e" in shown
    assert visible("tiling入口\tok") == "tiling入口\tok"  # printable text of any script stays as it is
    assert visible("a\nb") == "a\\nb" and visible("a\nb", lines=True) == "a\nb"
    assert visible("caf\udce9") == "caf\\xe9"  # a name that is not UTF-8 (surrogateescape)
    assert quoted('say "hi" \\ \x1b[2J') == '"say \\"hi\\" \\\\ \\e[2J"'
    assert quote_path(f"a{EVIL[:6]}") == '"a\\033]0;pw"'
    assert Path  # (imported for the fixtures above)
