"""The reward stage's exposed time per step with and without `reward.stream`, on the quickstart trainer.

Two in-process runs of the quickstart config (tiny Qwen-Image built locally unless `--model`), one request per
prompt, a reward function that sleeps `--sleep-ms` per image (a stand-in for a reward model): each prints the mean
over the steps after the first of `timing_s/gen`, `timing_s/reward`, `timing_s/reward_exposed` and `timing_s/step`,
and the per-step mean rewards (the same in both modes).

    python benchmarks/bench_reward_stream.py [--steps 6] [--prompts 4] [--inference-steps 10] [--sleep-ms 80]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import textwrap
from pathlib import Path

SLOW_REWARD = """
import time

def compute_score(data_source, solution_image, ground_truth, extra_info, **kwargs):
    time.sleep({sleep})
    return float(solution_image.double().mean()) / 255.0
"""


def run(model: str, folder: Path, overrides: list[str]) -> list[dict[str, float]]:
    from verl_omni.trainer.components import build_components, preflight
    from verl_omni.trainer.config import load_config
    from verl_omni.trainer.flow_grpo_trainer import FlowGRPOTrainer

    config = load_config(
        [f"actor_rollout_ref.model.path={model}", f"trainer.run_dir={folder / 'run'}",
         f"trainer.default_local_dir={folder / 'ckpt'}", *overrides],
        config_name="quickstart",
    )  # fmt: skip
    trainer = FlowGRPOTrainer(preflight(config).config)
    components = build_components(preflight(config), write=lambda _: None)
    try:
        trainer.setup(components)
        return trainer.train()
    finally:
        trainer.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a pipeline folder (default: a tiny Qwen-Image built here)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--inference-steps", type=int, default=10)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--sleep-ms", type=float, default=80.0)
    parser.add_argument("--reward-workers", type=int, default=2)
    args = parser.parse_args()

    import ray

    from verl_omni.testing import build_tiny_pipeline

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = args.model or str(build_tiny_pipeline("qwen_image", root / "qwen", preset="tiny", seed=0))
        reward = root / "slow_reward.py"
        reward.write_text(textwrap.dedent(SLOW_REWARD.format(sleep=args.sleep_ms / 1000)))
        steps = args.inference_steps
        common = [
            f"trainer.total_training_steps={args.steps}", "trainer.val_before_train=false", "trainer.test_freq=-1",
            "trainer.save_freq=-1", "trainer.logger=[console]", "trainer.cpu_threads_per_worker=1",
            f"data.train_batch_size={args.prompts}", "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.agent.prompts_per_request=1",
            f"actor_rollout_ref.rollout.pipeline.num_inference_steps={steps}",
            f"actor_rollout_ref.rollout.val_kwargs.pipeline.num_inference_steps={steps}",
            f"actor_rollout_ref.rollout.pipeline.height={args.size}",
            f"actor_rollout_ref.rollout.pipeline.width={args.size}",
            "actor_rollout_ref.rollout.algo.sde_window_size=1",
            f"actor_rollout_ref.rollout.algo.sde_window_range=[0,{steps - 1}]",
            f"reward.custom_reward_function.path={reward}", "reward.pool=thread",
            f"reward.num_workers={args.reward_workers}",
        ]  # fmt: skip
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
        try:
            for stream in ("false", "true"):
                history = run(model, root / f"stream_{stream}", [*common, f"reward.stream={stream}"])
                rows = history[1:] or history  # the first step warms up

                def mean(key: str, rows: list = rows) -> float:
                    return statistics.mean(r[key] for r in rows)

                print(
                    f"reward.stream={stream}: gen {mean('timing_s/gen'):.3f} s, reward {mean('timing_s/reward'):.3f} s,"
                    f" reward_exposed {mean('timing_s/reward_exposed'):.3f} s, step {mean('timing_s/step'):.3f} s;"
                    f" rewards {[round(r['critic/rewards/mean'], 6) for r in history]}"
                )
        finally:
            ray.shutdown()


if __name__ == "__main__":
    main()
