"""The compat module: version detection, the supported pairs, and the version branches taken from the contract."""

from __future__ import annotations

import logging
import re

import pytest

from verl_omni.rollout.vllm_omni import compat, contract


@pytest.mark.parametrize(
    ("version", "want"),
    [("0.30.0", (0, 30)), ("0.27.0rc1", (0, 27)), ("0.25.1.dev3+gabc123", (0, 25)), ("1.2", (1, 2))],
)
def test_minor_parses_release_rc_and_dev_versions(version, want):
    assert compat.minor(version) == want


def test_minor_rejects_garbage():
    with pytest.raises(ValueError, match=r"MAJOR\.MINOR"):
        compat.minor("latest")


def test_detect_refuses_releases_before_018_listing_the_pairs():
    with pytest.raises(compat.UnsupportedVersionError, match=r"vllm-omni 0\.16\.0 is not supported.*>= 0\.18") as e:
        compat.detect("0.16.0", "0.16.0")
    assert "vllm-omni 0.18.x + vllm 0.18.x" in str(e.value) and "vllm-omni 0.30.x + vllm 0.30.x" in str(e.value)


def test_detect_refuses_a_vllm_of_another_minor():
    with pytest.raises(compat.UnsupportedVersionError, match=r"vllm 0\.28\.0 does not match vllm-omni 0\.30\.0.*0\.30"):
        compat.detect("0.30.0", "0.28.0")


def test_detect_accepts_patch_and_rc_of_the_same_minor():
    runtime = compat.detect("0.27.0rc1", "0.27.0")
    assert runtime.has("output_envelope") and not runtime.has("lora_pipeline_hook")
    assert compat.detect("0.30.0", "0.30.2").vllm == "0.30.2"


def test_detect_warns_once_for_a_release_newer_than_checked(caplog):
    newest = max(r.omni for r in contract.RELEASES)
    with caplog.at_level(logging.WARNING, logger=compat.__name__):
        first = compat.detect("0.31.0", "0.31.1")
        compat.detect("0.31.0", "0.31.1")
    warnings = [r for r in caplog.records if "newer than" in r.getMessage()]
    assert len(warnings) == 1 and newest in warnings[0].getMessage()
    assert first.features == compat.features(newest)


def test_detect_without_vllm_omni_says_which_extra_to_install():
    with pytest.raises(ImportError, match=re.escape('pip install "verl-omni[vllm-omni]"')):
        compat.detect()


@pytest.mark.parametrize(
    ("version", "on", "off"),
    [
        ("0.18.0", {"custom_output"}, {"trajectory_fields", "request_batch", "output_envelope", "lora_pipeline_hook"}),
        ("0.22.0", {"custom_output", "trajectory_fields", "output_to_cpu"}, {"request_batch", "output_envelope"}),
        ("0.24.0", {"custom_output", "request_batch"}, {"output_envelope", "max_num_seqs_guard"}),
        ("0.26.0", {"output_envelope", "max_num_seqs_guard", "nested_request_output"}, {"custom_output"}),
        ("0.28.0", {"lora_pipeline_hook"}, {"nested_request_output", "abort_timeout", "upstream_binding_check"}),
        ("0.30.0", {"lora_pipeline_hook", "abort_timeout", "upstream_binding_check"}, {"custom_output"}),
    ],
)
def test_features_follow_the_contract_rows(version, on, off):
    flags = compat.features(version)
    assert {f for f in on if flags[f]} == on
    assert not {f for f in off if flags[f]}


def test_contract_rows_are_well_formed():
    ids = [e.id for e in contract.EXPECTATIONS]
    assert len(ids) == len(set(ids)), "contract row ids must be unique"
    kinds = {"module", "symbol", "no_symbol", "signature", "fields", "no_fields", "attrs", "assigns", "calls",
             "unpacks", "strings", "references", "bases"}  # fmt: skip
    for e in contract.EXPECTATIONS:
        assert e.kind in kinds and e.package in ("vllm_omni", "vllm") and e.module.startswith(e.package), e.id
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", e.id), e.id
    bounds: dict[str, set] = {}
    for e in contract.EXPECTATIONS:
        if e.feature:
            bounds.setdefault(e.feature, set()).add((e.since, e.before))
    assert all(len(b) == 1 for b in bounds.values()), f"a feature must have one version range: {bounds}"
    releases = [compat.minor(r.omni) for r in contract.RELEASES]
    assert releases == sorted(releases) and all(compat.minor(r.vllm) == compat.minor(r.omni) for r in contract.RELEASES)


def test_engine_kwargs_refuses_request_batching_naming_key_and_version():
    with pytest.raises(
        compat.UnsupportedVersionError,
        match=r"rollout\.engine_kwargs\.vllm_omni\.max_num_seqs=4.*vllm-omni 0\.26\.0 would refuse",
    ):
        compat.engine_kwargs(compat.detect("0.26.0", "0.26.0"), {"max_num_seqs": 4}, supports_request_batch=False)
    with pytest.raises(compat.UnsupportedVersionError, match=r"vllm-omni 0\.18\.0 runs one request at a time"):
        compat.engine_kwargs(compat.detect("0.18.0", "0.18.1"), {"max_num_seqs": 2}, supports_request_batch=True)


def test_engine_kwargs_drops_what_the_release_does_not_forward():
    args = {"model": "/m", "max_num_seqs": 1, "fault_tolerance_config": {}}
    assert compat.engine_kwargs(compat.detect("0.18.0", "0.18.1"), args, supports_request_batch=False) == {
        "model": "/m"
    }
    kept = compat.engine_kwargs(compat.detect("0.30.0", "0.30.0"), args, supports_request_batch=False)
    assert kept == {"model": "/m", "max_num_seqs": 1}


def test_engine_kwargs_refuses_lora_backends_a_release_cannot_serve():
    with pytest.raises(
        compat.UnsupportedVersionError, match=r"lora_backend='peft' needs vllm-omni >= 0\.28 \(installed: 0\.26"
    ):
        compat.engine_kwargs(compat.detect("0.26.0", "0.26.0"), {"lora_backend": "peft"}, supports_request_batch=False)
    runtime = compat.detect("0.30.0", "0.30.0")
    with pytest.raises(compat.UnsupportedVersionError, match=r"lora_backend='distill'.*rollout\.lora\.rank=0"):
        compat.engine_kwargs(runtime, {"lora_backend": "distill"}, supports_request_batch=False, lora=True)
    assert compat.engine_kwargs(runtime, {"lora_backend": "distill"}, supports_request_batch=False) == {
        "lora_backend": "distill"
    }
