"""Speed paths of `DiffusersFSDPEngine` give the same numbers as the plain ones (CPU, fp32), and the trainer
workload benchmark (`benchmarks/bench_trainer_workload.py`) still runs end to end in its tiny preset."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest
import torch

from .conftest import sample_trajectory

REPO = pathlib.Path(__file__).resolve().parents[4]


def _actor(**extra):
    return {
        "rollout_n": 2,
        "ppo_mini_batch_size": 2,
        "ppo_micro_batch_size_per_gpu": 2,
        "use_kl_loss": True,
        "kl_loss_coef": 0.04,
        "optim": {"lr": 1e-3, "weight_decay": 0.0, "eps": 1e-6},
        "fsdp_config": {"dtype": "float32"},
        **extra,
    }


def _batch(engine, traj, *, old: bool):
    batch = traj.clone()
    batch["advantages"] = torch.randn(batch.batch_size[0], generator=torch.Generator().manual_seed(0))
    batch.update(engine.compute_ref_log_prob(batch))
    if old:
        batch["old_log_probs"] = engine.compute_log_prob(batch)["old_log_probs"]
    return batch


def _params(engine):
    return {n: p.detach().full_tensor().clone() for n, p in engine.module.named_parameters() if p.requires_grad}


def test_on_policy_update_without_old_log_probs_equals_the_recompute_path(make_engine, tiny_sd3_pipe, tiny_sd3_path):
    """No `old_log_probs` in an on-policy batch: the update uses its own forwards' log-probs, with the same loss,
    gradients and new weights as a `compute_log_prob` pass first (LoRA + KL, SD3 with CFG)."""
    traj = sample_trajectory(tiny_sd3_pipe, guidance_scale=4.5)
    # rollout log-probs off by a known amount (as bf16 rollouts are): the update must not read them as old ones
    noise = 0.01 * torch.randn(traj["log_probs"].shape, generator=torch.Generator().manual_seed(1))
    traj["log_probs"] = traj["log_probs"] + noise
    model = {"lora_rank": 4, "lora_alpha": 8}
    results = []
    for old in (True, False):
        engine = make_engine(path=tiny_sd3_path, actor=_actor(), model=model)
        metrics = engine.update_policy(_batch(engine, traj, old=old))
        results.append((metrics, _params(engine)))
    (m_re, p_re), (m_own, p_own) = results
    assert m_own["actor/ratio_mean"] == 1.0 and m_own["actor/pg_clipfrac"] == 0.0
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "actor/rollout_logprob_diff_max"):
        assert m_own[key] == pytest.approx(m_re[key], rel=1e-5, abs=1e-9), key
    # the consistency metric still compares the old log-probs with the rollout's
    assert m_own["actor/rollout_logprob_diff_max"] == pytest.approx(noise.abs().max().item(), rel=1e-3)
    for name in p_re:
        torch.testing.assert_close(p_own[name], p_re[name], atol=1e-7, rtol=1e-6, msg=name)
    assert any(not torch.equal(p_own[n], p) for n, p in _params(make_engine(path=tiny_sd3_path, model=model)).items())


@pytest.mark.parametrize(
    "actor", [{"ppo_epochs": 2}, {"ppo_mini_batch_size": 1}], ids=["two-epochs", "two-mini-batches"]
)
def test_update_without_old_log_probs_off_policy_is_an_error(make_engine, qwen_trajectory, actor):
    engine = make_engine(actor={**_actor(use_kl_loss=False), **actor})
    batch = qwen_trajectory.clone()
    batch["advantages"] = torch.ones(batch.batch_size[0])
    with pytest.raises(ValueError, match=r"lacks 'old_log_probs', and the update is not on-policy \(actor\.ppo_epochs"):
        engine.update_policy(batch)
    del batch["log_probs"]
    with pytest.raises(ValueError, match=r"batch lacks \['log_probs'\]"):
        engine.update_policy(batch)


def _bench():
    path = REPO / "benchmarks" / "bench_trainer_workload.py"
    spec = importlib.util.spec_from_file_location("bench_trainer_workload", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up there
    try:
        spec.loader.exec_module(bench)
    finally:
        sys.modules.pop(spec.name, None)
    return bench


def test_trainer_workload_benchmark_runs_in_its_tiny_preset(tmp_path):
    res = _bench().main(
        ["--preset", "tiny", "--device", "cpu", "--variants", "recompute,fused", "--out", str(tmp_path)]
    )
    runs = res["runs"]
    assert set(runs) == {"baseline", "recompute", "fused"} and not any("error" in r for r in runs.values())
    for run in runs.values():
        assert run["images_per_s"] > 0 and run["stage_s"]["step"] >= run["stage_s"]["update"] > 0
    for name in ("recompute", "fused"):  # fp32 on the CPU: recompute and own forwards equal the rollout's
        assert runs[name]["step1"]["pg_clipfrac"] == 0.0
        assert runs[name]["step1"]["logprob_gap_max"] < 1e-4
    # fused: no old-log-prob pass at all (the stage is only the bookkeeping between two clock laps)
    assert runs["fused"]["stage_s"]["old_log_prob"] < 0.2 * runs["recompute"]["stage_s"]["old_log_prob"]
    assert (tmp_path / "bench_trainer_workload_cpu_tiny.json").is_file()


def test_trainer_workload_benchmark_qwen_preset_splits_the_step_by_stage(tmp_path):
    res = _bench().main(["--preset", "tiny-qwen", "--device", "cpu", "--variants", "recompute", "--out", str(tmp_path)])
    run = res["runs"]["recompute"]
    assert "baseline" not in res["runs"] and "error" not in run
    shares = run["stage_share"]
    assert set(shares) == {"gen", "reward", "old_log_prob", "ref", "update", "weight_sync"}
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-3)
    assert run["step1"]["pg_clipfrac"] == 0.0
