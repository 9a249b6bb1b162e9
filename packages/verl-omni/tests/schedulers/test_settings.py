"""Tests for `verl_omni.schedulers.settings`: the int64 codes a trajectory stores for `sde_type` / `cps_logprob`."""

from __future__ import annotations

import pytest
import torch

from verl_omni.schedulers import CPS_LOGPROBS, SDE_TYPES, setting_code, setting_name


def test_codes_index_the_public_tuples_and_round_trip():
    # stored format: append only
    assert SDE_TYPES == ("sde", "cps", "dance_sde") and CPS_LOGPROBS == ("exact", "legacy")
    for key, choices in (("sde_type", SDE_TYPES), ("cps_logprob", CPS_LOGPROBS)):
        for code, name in enumerate(choices):
            assert setting_code(key, name) == code
            assert setting_name(key, code) == name
            assert setting_name(key, torch.tensor(code)) == name
            assert setting_name(key, torch.full((1,), code, dtype=torch.long)) == name


@pytest.mark.parametrize(
    ("key", "code", "pattern"),
    [
        ("sde_type", 3, r"trajectory\['sde_type'\]: unknown code 3; valid codes: 0 = 'sde', 1 = 'cps', 2 = 'dance"),
        ("cps_logprob", -1, r"trajectory\['cps_logprob'\]: unknown code -1; valid codes: 0 = 'exact', 1 = 'legacy'"),
        ("sde_type", torch.tensor(0.0), r"trajectory\['sde_type'\]: expected one integer code"),
        ("sde_type", torch.tensor([0, 1]), r"trajectory\['sde_type'\]: expected one integer code"),
    ],
)
def test_setting_name_rejects_bad_codes_naming_the_key(key, code, pattern):
    with pytest.raises(ValueError, match=pattern):
        setting_name(key, code)


def test_setting_code_rejects_unknown_values_and_keys():
    with pytest.raises(ValueError, match=r"sde_type: expected one of \('sde', 'cps', 'dance_sde'\), got 'flux_step'"):
        setting_code("sde_type", "flux_step")
    with pytest.raises(KeyError, match=r"'noise_level' is not a coded sampler setting; known: sde_type, cps_logprob"):
        setting_code("noise_level", "0.7")
