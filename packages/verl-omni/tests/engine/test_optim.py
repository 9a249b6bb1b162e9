"""Tests for `verl_omni.engine.optim`: AdamW construction and the learning-rate schedule."""

from __future__ import annotations

import math

import pytest
import torch

from verl_omni.config import OptimConfig
from verl_omni.engine.optim import build_lr_scheduler, build_optimizer, lr_factor


def test_lr_factor_linear_warmup_then_constant():
    cfg = OptimConfig(lr_warmup_steps=4)
    assert [lr_factor(s, cfg) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_lr_factor_warmup_ratio_and_cosine_to_floor():
    cfg = OptimConfig(lr_scheduler_type="cosine", total_training_steps=10, lr_warmup_steps_ratio=0.2, min_lr_ratio=0.1)
    assert lr_factor(0, cfg) == pytest.approx(0.5) and lr_factor(1, cfg) == pytest.approx(1.0)
    assert lr_factor(2, cfg) == pytest.approx(1.0)
    mid = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5))
    assert lr_factor(6, cfg) == pytest.approx(mid)
    assert lr_factor(10, cfg) == pytest.approx(0.1) and lr_factor(50, cfg) == pytest.approx(0.1)


def test_lr_factor_one_indexed_step_shifts_the_schedule():
    assert lr_factor(0, OptimConfig(lr_warmup_steps=2, zero_indexed_step=False)) == 1.0


def test_build_optimizer_and_scheduler_apply_config():
    w = torch.nn.Parameter(torch.ones(3))
    cfg = OptimConfig(lr=0.1, betas=[0.8, 0.9], weight_decay=0.5, eps=1e-6, lr_warmup_steps=2)
    opt = build_optimizer([w], cfg)
    sched = build_lr_scheduler(opt, cfg)
    group = opt.param_groups[0]
    assert (group["betas"], group["weight_decay"], group["eps"]) == ((0.8, 0.9), 0.5, 1e-6)
    assert group["lr"] == pytest.approx(0.05)
    w.grad = torch.ones(3)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)


def test_build_optimizer_rejects_no_trainable_parameter():
    with pytest.raises(ValueError, match=r"no trainable parameter"):
        build_optimizer([], OptimConfig())
