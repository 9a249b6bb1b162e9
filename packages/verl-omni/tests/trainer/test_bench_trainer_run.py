"""`benchmarks/bench_trainer_run.py` drives the real trainer end to end in its tiny preset on the CPU (~30 s)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import statistics
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[4]


def _bench():
    path = REPO / "benchmarks" / "bench_trainer_run.py"
    spec = importlib.util.spec_from_file_location("bench_trainer_run", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    try:
        spec.loader.exec_module(bench)
    finally:
        sys.modules.pop(spec.name, None)
    return bench


@pytest.mark.timeout(300)
def test_trainer_run_benchmark_measures_the_trainer_per_stage_and_leaves_no_process(tmp_path):
    pytest.importorskip("ray")
    res = _bench().main(
        ["--preset", "tiny", "--device", "cpu", "--variants", "recompute", "--warmup", "1", "--steps", "2",
         "--out", str(tmp_path)]
    )  # fmt: skip
    run = res["variants"]["recompute"]
    assert run["rc"] == 0 and run["leftover_processes"] == {}
    # the figures are the median of the measured steps of the run's own metrics.jsonl (warm-up excluded)
    rows = [json.loads(line) for line in (tmp_path / "runs" / "tiny_recompute" / "metrics.jsonl").open()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert run["step_s"] == pytest.approx(statistics.median(r["timing_s/step"] for r in rows[1:]))
    assert run["warmup_step_s"] == [round(rows[0]["timing_s/step"], 2)]
    assert run["images_per_s"] == pytest.approx(4 / run["step_s"])
    # every stage the issue asks about is timed: generate, reward, old log-prob, ref, update, weight sync, transfer
    assert {"gen", "rollout_sleep", "reward", "old_log_prob", "ref", "update_actor", "update_weights"} <= set(
        run["stage_s"]
    )
    assert sum(run["stage_s"].values()) == pytest.approx(run["step_s"], rel=1e-6)
    assert {"rollout_wake", "weight_export", "weight_send", "gen_request_overhead", "version_check_and_rest"} <= set(
        run["sub_stage_s"]
    )
    assert run["step1"]["pg_clipfrac"] == 0.0  # fp32: the recomputed old log-probs equal the rollout's
    assert res["baseline"]["images_per_s"] > 0 and run["vs_baseline"] > 0
    assert pathlib.Path(res["chart"]).is_file()
    assert (tmp_path / "bench_trainer_run_cpu_tiny.json").is_file()


def test_variant_parts_map_to_overrides_and_ngpu_scales_the_step():
    bench = _bench()
    assert bench.variant_overrides("awake") == ["actor_rollout_ref.rollout.free_cache_engine=false"]
    two = bench.variant_overrides("awake+2gpu")
    prompts = 2 * len(bench.PROMPTS)  # weak scaling: each device gets the one-device step's prompts
    assert two == [
        "actor_rollout_ref.rollout.free_cache_engine=false",
        "trainer.n_gpus_per_node=2",
        f"data.train_batch_size={prompts}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}",
    ]
    assert [bench.single_gpu_name(n) for n in ("compile+2gpu", "2gpu", "compile")] == ["compile", "default", None]
    with pytest.raises(KeyError):
        bench.variant_overrides("nosuch")


@pytest.mark.timeout(400)
def test_two_rank_run_reports_its_scaling_against_the_one_rank_run(tmp_path):
    """`2gpu` on the CPU: two gloo ranks and two rollout replicas under Ray, twice the images per step."""
    pytest.importorskip("ray")
    res = _bench().main(
        ["--preset", "tiny", "--device", "cpu", "--variants", "default,2gpu", "--warmup", "1", "--steps", "1",
         "--skip-baseline", "--out", str(tmp_path)]
    )  # fmt: skip
    one, two = res["variants"]["default"], res["variants"]["2gpu"]
    assert one["rc"] == two["rc"] == 0 and two["leftover_processes"] == {}
    assert two["images_per_step"] == 2 * one["images_per_step"]
    assert two["vs_1gpu"] == pytest.approx(two["images_per_s"] / one["images_per_s"])
    assert "vs_1gpu" not in one


@pytest.mark.parametrize(("preset", "params_b"), [("flux", 2.542), ("wan", 1.413)])
def test_model_presets_build_the_stated_transformer_and_every_lora_target_matches(preset, params_b):
    """Issue 33's presets (built on the meta device: no weights): FLUX.1-dev's 3072-wide blocks (4 double + 8 single)
    and Wan 2.1 1.3B's transformer; each LoRA target names a linear of the transformer, and the overrides carry the
    model's guidance key, frames and micro-batch."""
    import torch

    bench = _bench()
    from trainer_workload_parts import PRESETS, _build_flux, _build_wan, lora_targets

    w = PRESETS[preset]
    with torch.device("meta"):
        pipe = _build_flux(w) if preset == "flux" else _build_wan(w)
    t = pipe.transformer
    assert sum(p.numel() for p in t.parameters()) / 1e9 == pytest.approx(params_b, abs=1e-3)
    assert t.config.num_attention_heads * t.config.attention_head_dim == (3072 if preset == "flux" else 1536)
    linears = [n for n, m in t.named_modules() if isinstance(m, torch.nn.Linear)]
    for target in lora_targets(w):
        assert any(n == target or n.endswith("." + target) for n in linears), target
    over = bench.workload_overrides(w, pathlib.Path("/f"), pathlib.Path("/p.jsonl"), "cuda", "bfloat16")
    arr = "actor_rollout_ref"
    assert f"{arr}.rollout.pipeline.guidance_scale={w.guidance}" in over
    assert f"{arr}.rollout.pipeline.num_frames={33 if preset == 'wan' else 1}" in over
    assert f"{arr}.actor.ppo_micro_batch_size_per_gpu={1 if preset == 'wan' else 16}" in over


def test_reward_model_options_compose_a_valid_trainer_config_routed_to_the_ocr_reward():
    """`--reward-model` and the variant parts `stream`, `rm-vllm`, `rm-pool` (trainer_run_reward.py) give a config the
    trainer accepts, with the OCR reward on the reward model; the prompts carry a ground truth each."""
    bench = _bench()
    from trainer_run_reward import REWARD_MODELS, ocr_rows, reward_model_overrides

    from verl_omni.trainer.config import load_config

    assert {"stream", "rm-vllm", "rm-pool"} <= bench.VARIANTS.keys() and {"tiny", "mid"} <= REWARD_MODELS.keys()
    w = bench.PRESETS["a"]
    base = bench.workload_overrides(w, pathlib.Path("/f"), pathlib.Path("/p.jsonl"), "cuda", "bfloat16")
    extra = reward_model_overrides(pathlib.Path("/rm"), "cuda", "bfloat16")
    parts = bench.variant_overrides("perprompt+stream+rm-vllm+rm-pool")
    config = load_config([*base, *extra, *parts], config_name="diffusion_trainer")
    rm = config.reward.reward_model
    assert config.reward.stream and rm.enable and str(rm.model_path) == "/rm" and rm.rollout.name == "vllm"
    assert rm.enable_resource_pool and rm.nnodes == 1 and rm.n_gpus_per_node == 1
    assert config.reward.custom_reward_function.name == "compute_score_ocr"
    assert config.actor_rollout_ref.rollout.agent.prompts_per_request == 1
    rows = ocr_rows([{"prompt": p, "data_source": "jpeg_compressibility"} for p in bench.PROMPTS])
    assert all(r["data_source"] == "flow_grpo/ocr" and r["ground_truth"] for r in rows)
