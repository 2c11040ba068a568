"""Manifest `[[signatures]]` and `kind = "advisory"`: loaded strictly, errors name the key path."""

from __future__ import annotations

import pytest

from test_manifest import _drop, _set, manifest_data, write_manifest
from vllm_hotfix_guard.errors import InvalidInput, Refused
from vllm_hotfix.catalog.manifest import load_manifest
from vllm_hotfix.catalog.signatures import literal_anchor

SIGNATURES = [
    {"pattern": r"CUDA error: an illegal memory access", "role": "first-error", "weight": 0.5, "explain": "the crash"},
    {"pattern": r"Mamba cache mode is set to 'align'", "role": "config", "weight": 0.5, "explain": "align mode"},
    {"pattern": r"speculative_config=SpeculativeConfig\(method='\w*mtp'", "role": "config", "weight": -0.5,
     "explain": "MTP hides it"},
    {"pattern": "tiling入口", "role": "noise", "explain": "a debug print at ERROR level"},
]


def advisory_data(**changes) -> dict:
    data = manifest_data(**{"kind": "advisory", "workaround": "Use the trtllm backend.", "signatures": SIGNATURES[:2], **changes})
    for key in ("patches", "checks", "requires", "supersedes", "fixed_in"):
        data.pop(key, None)
    data.update((k, v) for k, v in changes.items() if k == "fixed_in")
    return data


def test_signatures_load_with_their_prefilter_anchor(tmp_path):
    m = load_manifest(write_manifest(tmp_path, manifest_data(signatures=SIGNATURES)))
    assert [(s.role, s.weight) for s in m.signatures] == [("first-error", 0.5), ("config", 0.5), ("config", -0.5), ("noise", 0.0)]
    assert [s.tier for s in m.signatures] == ["generic", "generic", "veto", "generic"]  # a negative weight is a veto
    assert all(s.confirmed for s in m.signatures)
    assert m.signatures[2].anchor == "speculative_config=SpeculativeConfig(method='"
    assert m.kind == "hotfix" and m.symptoms  # the free-text symptoms of older manifests still load


@pytest.mark.parametrize("pattern, anchor", [
    (r"NVRM: Xid \(PCI:[^)]*\): 13\b.*Out Of Range Address", "Out Of Range Address"),
    (r"(?:foo|bar)bazz", "bazz"), (r"ab+cdef", "cdef"), (r"(?i)hello", ""), (r"[Ss]tructured output", "tructured output"),
])
def test_literal_anchor_is_text_every_match_contains(pattern, anchor):
    assert literal_anchor(pattern) == anchor


INVALID = [
    (_set(("signatures",), [dict(SIGNATURES[0], pattern="illegal (memory")]),
     "signatures[0].pattern: invalid regular expression: missing ), unterminated subpattern"),
    (_set(("signatures",), [SIGNATURES[0], dict(SIGNATURES[1], pattern=r"\d+|x")]),
     "signatures[1].pattern: needs a literal text of at least 3 characters"),
    (_set(("signatures",), [dict(SIGNATURES[0], role="crash")]),
     "signatures[0].role: expected one of first-error, error-line, fault-report, traceback, context, config, noise, got 'crash'"),
    (_set(("signatures",), [dict(SIGNATURES[0], role=["traceback", "kernel"])]),
     "signatures[0].role[1]: expected one of first-error, error-line, fault-report, traceback, context, config, noise, got 'kernel'"),
    (_set(("signatures",), [dict(SIGNATURES[0], role=[])]), "signatures[0].role: needs at least one role"),
    (_set(("signatures",), [dict(SIGNATURES[0], role=["traceback", "traceback"])]),
     "signatures[0].role[1]: 'traceback' is listed twice"),
    (_set(("signatures",), [dict(SIGNATURES[0], role=3)]), "signatures[0].role: expected a string or an array, got an integer"),
    (_set(("signatures",), [dict(SIGNATURES[3], role=["noise", "context"])]), "signatures[0].role: a noise signature has the one role 'noise'"),
    (_set(("signatures",), [dict(SIGNATURES[0], tier="specific", role="context")]),
     "signatures[0].role: a specific signature counts only where a name faults (fault-report, traceback, error-line), "
     "not 'context': a name in a profiler table, a config dump or prose would name the fix"),
    (_set(("signatures",), [dict(SIGNATURES[0], tier="specific", role=["fault-report", "first-error"])]),
     "signatures[0].role: a specific signature counts only where a name faults (fault-report, traceback, error-line), "
     "not 'first-error'"),
    (_set(("signatures",), [dict(SIGNATURES[0], weight=1.0)]), "signatures[0].weight: must be at least -1 and below 1, got 1.0"),
    (_set(("signatures",), [dict(SIGNATURES[0], tier="strong")]),
     "signatures[0].tier: expected one of specific, condition, generic, veto, got 'strong'"),
    (_set(("confirm",), [{"step": "restart with CUDA_LAUNCH_BLOCKING=1"}]), "confirm[0].shows: missing required key"),
    (_set(("confirm",), [{"step": "x", "shows": "y", "run": "z"}]), "confirm[0].run: unknown key (allowed: step, shows)"),
    (_set(("confirm",), [{"step": " ", "shows": "y"}]), "confirm[0].step: must not be empty"),
    (_set(("confirm",), {"step": "x"}), "confirm: expected an array, got a table"),
    (_set(("platforms",), ["cuda", "gaudi"]), "platforms[1]: expected one of cuda, rocm, ascend, metax, xpu, tpu, cpu, got 'gaudi'"),
    (_set(("platforms",), ["cuda", "cuda"]), "platforms[1]: 'cuda' is listed twice"),
    (_set(("platforms",), []), "platforms: needs at least one platform"),
    (_set(("platforms",), "cuda"), "platforms: expected an array, got a string"),
    (_set(("signatures",), [dict(SIGNATURES[0], tier="specific", weight=-0.2)]),
     "signatures[0].weight: a negative weight is evidence against: use tier = \"veto\""),
    (_set(("signatures",), [dict(SIGNATURES[0], confirmed="no")]), "signatures[0].confirmed: expected true or false, got a string"),
    (_set(("signatures",), [dict(SIGNATURES[0], pattern="(a+)+$ and more")]), "signatures[0].pattern: a repetition of varying count inside"),
    (_set(("signatures",), [dict(SIGNATURES[0], pattern=r"(?:x*y?)*abcd")]), "signatures[0].pattern: a repetition of something that can match nothing"),
    (_set(("signatures",), [dict(SIGNATURES[0], pattern=r"CUDA error(?= \d)")]), "signatures[0].pattern: a lookahead / lookbehind is not allowed"),
    (_set(("signatures",), [dict(SIGNATURES[0], pattern=r"(err)or \1 again")]), "signatures[0].pattern: a back-reference is not allowed"),
    (_set(("signatures",), [dict(SIGNATURES[0], weight="high")]), "signatures[0].weight: expected an integer or a number, got a string"),
    (_set(("signatures",), [dict(SIGNATURES[3], weight=0.2)]), "signatures[0].weight: a noise signature does not count"),
    (_set(("signatures",), [{k: v for k, v in SIGNATURES[0].items() if k != "explain"}]), "signatures[0].explain: missing required key"),
    (_set(("signatures",), [dict(SIGNATURES[0], why="x")]), "signatures[0].why: unknown key"),
    (_set(("kind",), "bug"), "kind: expected one of hotfix, advisory, got 'bug'"),
    (_set(("workaround",), "restart"), 'workaround: only for kind = "advisory"'),
]


def assert_invalid(tmp_path, data: dict, change, expected: str) -> None:
    change(data)
    path = write_manifest(tmp_path, data, name="x")
    with pytest.raises(InvalidInput) as caught:
        load_manifest(path)
    assert caught.value.message.startswith(f"{path}: {expected}") and caught.value.exit_code == 8


@pytest.mark.parametrize("change, expected", INVALID, ids=[e for _, e in INVALID])
def test_invalid_signatures_name_file_and_key_path(tmp_path, change, expected):
    assert_invalid(tmp_path, manifest_data(), change, expected)


def test_an_advisory_has_signatures_and_a_workaround_and_no_patch(tmp_path):
    m = load_manifest(write_manifest(tmp_path, advisory_data(fixed_by="demo-fix@3")))
    assert (m.kind, m.patches, m.workaround, m.fixed_by) == ("advisory", (), "Use the trtllm backend.", "demo-fix@3")
    with pytest.raises(Refused, match="is an advisory: there is no patch to apply"):
        m.patches_for("0.30.0")


@pytest.mark.parametrize("change, expected", [
    (_set(("patches",), [{"file": "x.patch", "sha256": "0" * 64}]), "patches: an advisory has no patches"),
    (_drop("workaround"), "workaround: missing required key"),
    (_set(("fixed_by",), "demo-fix"), "fixed_by: expected ID@VERSION of the hotfix that fixes it, got 'demo-fix'"),
])
def test_invalid_advisories(tmp_path, change, expected):
    assert_invalid(tmp_path, advisory_data(), change, expected)


def test_tiers_roles_confirm_and_platforms_load(tmp_path):
    signatures = [dict(SIGNATURES[0], tier="specific", role=["fault-report", "traceback"], confirmed=False),
                  dict(SIGNATURES[1], tier="condition"), dict(SIGNATURES[1], tier="veto")]
    confirm = [{"step": "restart with CUDA_LAUNCH_BLOCKING=1", "shows": "the traceback names the kernel"}]
    m = load_manifest(write_manifest(tmp_path, manifest_data(signatures=signatures, confirm=confirm, platforms=["cuda", "rocm"])))
    assert [(s.tier, s.roles, s.confirmed) for s in m.signatures] == [
        ("specific", ("fault-report", "traceback"), False), ("condition", ("config",), True), ("veto", ("config",), True)]
    assert m.signatures[0].role == "fault-report|traceback"
    assert [(c.step, c.shows) for c in m.confirm] == [(confirm[0]["step"], confirm[0]["shows"])]
    assert m.platforms == ("cuda", "rocm")


def test_naming_problem_is_a_manifest_without_specific_evidence(tmp_path):
    from vllm_hotfix.catalog.signatures import naming_problem

    old_form = load_manifest(write_manifest(tmp_path, manifest_data(signatures=SIGNATURES)))  # weights, no tier
    assert "doctor can never name it" in naming_problem(old_form.signatures)
    named = load_manifest(write_manifest(tmp_path, manifest_data(signatures=[
        dict(SIGNATURES[0], tier="specific", role="error-line")])))
    assert naming_problem(named.signatures) is None and naming_problem(()) is None


def test_every_catalog_pattern_is_linear_time_and_the_unconfirmed_ones_are_marked(run_hotfix):
    from vllm_hotfix.catalog.index import Catalog
    from vllm_hotfix.catalog.signatures import linear_time_problem

    catalog = Catalog.load(env={})
    assert all(linear_time_problem(s.pattern) is None for m in catalog.latest() for s in m.signatures)
    unconfirmed = {m.id for m in catalog.latest() for s in m.signatures if not s.confirmed}
    assert {"qwen38-flash-next", "qwen38-ple-placeholder", "qwen38-draft-rejected-assert", "qwen38-response-format-500"} <= unconfirmed
    shown = run_hotfix("show", "qwen38-ple-placeholder").stdout
    assert "specific error-line  (unconfirmed: written from a description, not yet seen in a real log)" in shown
