"""The per-algorithm benchmark settings: `bench_trainer_run.py`'s algorithm parts compose into configs the trainer
accepts on workload A, and `bench_algorithms_cpu.py` reads the reward at a wall-clock budget."""

from __future__ import annotations

import functools
import importlib.util
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[4]


@functools.cache
def _load(name: str):
    sys.path.insert(0, str(REPO / "benchmarks"))  # the benchmarks import their sibling modules
    try:
        spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return module


# variant -> (loss_mode, CFG weight of the rollout, actor.use_kl_loss, ref_kl_coef, SDE window, timestep_fraction)
EXPECTED = {
    "nocfg": ("flow_grpo", 1.0, True, 0.0, 0, 1.0),
    "nocfg+nokl": ("flow_grpo", 1.0, False, 0.0, 0, 1.0),
    "nft": ("diffusion_nft", 1.0, False, 1e-4, 0, 1.0),
    "nft+nokl": ("diffusion_nft", 1.0, False, 0.0, 0, 1.0),
    "dpo": ("dpo", 1.0, False, 0.0, 0, 1.0),
    "mix": ("flow_grpo", 4.5, True, 0.0, 2, 1.0),
    "mix+flash": ("flow_grpo", 4.5, True, 0.0, 2, 1.0),
    "dance": ("flow_grpo", 4.5, True, 0.0, 0, 0.6),
    "guard": ("grpo_guard", 4.5, True, 0.0, 0, 1.0),
    "dppo": ("flow_dppo", 4.5, True, 0.0, 0, 1.0),
}


@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_algorithm_variant_is_accepted_on_workload_a(variant, tmp_path):
    """Each part passes the trainer's own config checks on workload A (DiffusionNFT and DPO refuse KL and CFG: the
    parts must turn both off) and sets what docs/omni/algorithms.md says it compares."""
    from verl_omni.trainer.config import load_config

    bench = _load("bench_trainer_run")
    w = bench.PRESETS["a"]
    base = bench.workload_overrides(w, tmp_path / "pipeline", tmp_path / "prompts.jsonl", "cuda", "bfloat16")
    config = load_config([*base, *bench.variant_overrides(variant)])
    arr = config.actor_rollout_ref
    sampling = arr.rollout.sampling_config(w.model)
    loss = arr.actor.diffusion_loss
    got = (loss.loss_mode, sampling.guidance_scale, arr.actor.use_kl_loss, loss.ref_kl_coef, sampling.sde_window_size,
           config.algorithm.timestep_fraction)  # fmt: skip
    assert got == EXPECTED[variant]
    assert sampling.dpm_algorithm_type == ("dpmsolver++" if "flash" in variant else None)
    # the workload itself is unchanged: same images per step, steps and size as FlowGRPO's `default`
    assert (arr.rollout.n, sampling.num_inference_steps, sampling.height) == (w.n, w.steps, w.height)


def test_reward_at_budget_averages_the_last_steps_finished_in_time():
    bench = _load("bench_algorithms_cpu")
    entry = {"reward_mean": [0.1, 0.2, 0.3, 0.4, 0.5], "cumulative_s": [1.0, 2.0, 3.0, 4.0, 5.0]}
    assert bench.reward_at(entry, 4.0) == pytest.approx(0.3)  # steps 2..4; step 5 ends after the budget
    assert bench.reward_at(entry, 1.5) == pytest.approx(0.1)  # fewer than 3 steps done: their mean
    rows = [{"timing_s/step": s, "critic/rewards/mean": r, "critic/rewards/std": 0.1, "perf/images_per_step": 32}
            for s, r in [(9.0, 0.1), (2.0, 0.2), (3.0, 0.3)]]  # fmt: skip
    summary = bench.summarize(rows)
    assert summary["cumulative_s"] == [9.0, 11.0, 14.0]
    assert summary["step_s"] == 2.5  # the median after the warm-up step
    assert summary["min_step_s"] == 2.0  # the ratios to FlowGRPO use the fastest step (a shared machine's noise)
    assert summary["images_per_s"] == pytest.approx(32 / 2.5)
