"""Tests for `verl_omni.algos.registry`: the loss registry keyed by `actor.diffusion_loss.loss_mode`."""

from __future__ import annotations

import pytest
import torch

from verl_core.config import ConfigValueError
from verl_omni.algos import (
    LossSpec,
    PolicyLossInput,
    PolicyLossOutput,
    flow_grpo_loss,
    flow_grpo_policy_loss,
    get_loss,
    kl_penalty_exact,
    loss_spec,
    register_loss,
    registered_losses,
)
from verl_omni.algos import registry as registry_module
from verl_omni.config import DiffusionActorConfig
from verl_omni.trainer.config import DiffusionTrainerConfig


@pytest.fixture
def clean_registry(monkeypatch):
    """Registrations made by a test are dropped after it."""
    monkeypatch.setattr(registry_module, "_LOSSES", registry_module._LOSSES.copy())
    monkeypatch.setattr(registry_module, "_SPECS", dict(registry_module._SPECS))


def _inputs(ref: torch.Tensor | None = None) -> PolicyLossInput:
    gen = torch.Generator().manual_seed(0)
    mean = torch.randn(3, 2, 4, generator=gen, dtype=torch.float64)
    return PolicyLossInput(
        log_prob=torch.tensor([-0.4, -0.39, -0.41], dtype=torch.float64),
        old_log_prob=torch.full((3,), -0.4, dtype=torch.float64),
        advantages=torch.tensor([1.0, -2.0, 6.0], dtype=torch.float64),
        prev_sample_mean=mean,
        std_dev_t=torch.full((3,), 0.5, dtype=torch.float64),
        std=torch.full((3,), 0.2, dtype=torch.float64),
        ref_prev_sample_mean=ref,
    )


def test_flow_grpo_is_registered_by_default():
    assert "flow_grpo" in registered_losses()
    assert get_loss("flow_grpo") is flow_grpo_loss


def test_get_loss_unknown_name_lists_registered_ones():
    with pytest.raises(
        KeyError, match=r"^actor\.diffusion_loss\.loss_mode: unknown loss 'offline_dpo'; registered: (\w+, )*flow_grpo"
    ):
        get_loss("offline_dpo")


def test_register_loss_refuses_a_second_function_under_one_name(clean_registry):
    with pytest.raises(ValueError, match=r"loss_mode: 'flow_grpo' is already registered to flow_grpo_loss"):
        register_loss("flow_grpo")(lambda inputs, config: None)
    assert register_loss("flow_grpo")(flow_grpo_loss) is flow_grpo_loss  # re-registering the same one is a no-op


def test_trainer_config_accepts_a_newly_registered_loss_mode(clean_registry):
    node = {"actor": {"diffusion_loss": {"loss_mode": "my_loss"}}}
    expected = r"^actor_rollout_ref\.actor\.diffusion_loss\.loss_mode: unknown loss 'my_loss'; registered: "
    with pytest.raises(ConfigValueError, match=expected):
        DiffusionTrainerConfig(actor_rollout_ref=node)

    @register_loss("my_loss")
    def my_loss(inputs: PolicyLossInput, config: DiffusionActorConfig) -> PolicyLossOutput:
        raise NotImplementedError

    assert DiffusionTrainerConfig(actor_rollout_ref=node).actor_rollout_ref.actor.diffusion_loss.loss_mode == "my_loss"
    assert get_loss("my_loss") is my_loss
    assert loss_spec("my_loss") == LossSpec()  # needs nothing beyond the common inputs, any sampler


def test_register_loss_refuses_an_unknown_needed_input(clean_registry):
    with pytest.raises(ValueError, match=r"needs: \['noise'\] are not optional PolicyLossInput fields"):
        register_loss("needs_noise", needs=("noise",))


def test_flow_grpo_loss_without_kl_is_the_policy_loss():
    config = DiffusionActorConfig(diffusion_loss={"clip_ratio": 1e-2, "adv_clip_max": 5.0})
    inputs = _inputs()
    got = flow_grpo_loss(inputs, config)
    want = flow_grpo_policy_loss(inputs.log_prob, inputs.old_log_prob, inputs.advantages, clip_ratio=1e-2,
                                 adv_clip_max=5.0)  # fmt: skip
    assert got.kl is None
    torch.testing.assert_close(got.loss, want.loss, rtol=0, atol=0)
    assert got.metrics.keys() == want.metrics.keys()


def test_flow_grpo_loss_adds_the_configured_kl_with_its_coefficient():
    config = DiffusionActorConfig(use_kl_loss=True, kl_loss_coef=0.04, diffusion_loss={"kl_type": "exact"})
    ref = torch.zeros(3, 2, 4, dtype=torch.float64)
    inputs = _inputs(ref)
    got = flow_grpo_loss(inputs, config)
    kl = kl_penalty_exact(inputs.prev_sample_mean, ref, inputs.std)  # "exact" uses the true std s, not std_dev_t
    torch.testing.assert_close(got.kl, kl, rtol=0, atol=0)
    torch.testing.assert_close(got.loss, got.pg_loss + 0.04 * kl, rtol=1e-15, atol=0)


def test_flow_grpo_loss_with_kl_needs_the_reference_means():
    config = DiffusionActorConfig(use_kl_loss=True)
    with pytest.raises(ValueError, match=r"ref_prev_sample_mean: actor\.use_kl_loss is true"):
        flow_grpo_loss(_inputs(), config)
