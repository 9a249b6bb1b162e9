"""Shared helpers of the trainer tests: one local Ray per module, and a tiny, fast trainer run in-process."""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from collections.abc import Callable
from typing import Any

import pytest

FAST = [
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.rollout.pipeline.height=32",
    "actor_rollout_ref.rollout.pipeline.width=32",
    "actor_rollout_ref.rollout.pipeline.num_inference_steps=3",
    "actor_rollout_ref.rollout.pipeline.max_sequence_length=16",
    "actor_rollout_ref.rollout.algo.sde_window_size=1",
    "actor_rollout_ref.rollout.algo.sde_window_range=[0,2]",
    "actor_rollout_ref.rollout.val_kwargs.pipeline.num_inference_steps=3",
    "data.train_batch_size=2",
    "trainer.cpu_threads_per_worker=1",
    "trainer.val_before_train=true",
    "trainer.test_freq=-1",
    "trainer.logger=[console]",
    "trainer.worker_timeout_s=300",
    "trainer.ray_wait_register_center_timeout=300",
]
"""Overrides of the `quickstart` config that make a step take about a second on the tiny model."""


@dataclasses.dataclass
class TrainerRun:
    """What a finished (or failed) in-process run left behind."""

    history: list[dict[str, float]]
    val_images: dict[int, Any]
    fingerprint: dict[str, Any] | None
    error: BaseException | None
    run_dir: pathlib.Path
    ckpt_dir: pathlib.Path


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)  # never join another run's Ray
    yield ray
    ray.shutdown()


def run_trainer(
    model_path: pathlib.Path,
    folder: pathlib.Path,
    overrides: list[str],
    *,
    fingerprint: bool = False,
    wrap: Callable[[Any], None] | None = None,
    inspect: Callable[[Any], None] | None = None,
) -> TrainerRun:
    """Run the trainer in-process on the running Ray (quickstart config + `FAST` + `overrides`).

    `wrap(components)` runs before `setup`; `inspect(components)` after a successful `train`, before `cleanup`.
    """
    from verl_omni.trainer.components import build_components, preflight
    from verl_omni.trainer.config import load_config
    from verl_omni.trainer.flow_grpo_trainer import FlowGRPOTrainer

    run_dir, ckpt_dir = folder / "run", folder / "ckpt"
    config = load_config(
        [
            f"actor_rollout_ref.model.path={model_path}",
            *FAST,
            f"trainer.run_dir={run_dir}",
            f"trainer.default_local_dir={ckpt_dir}",
            *overrides,
        ],
        config_name="quickstart",
    )
    trainer = FlowGRPOTrainer(preflight(config).config)
    components = build_components(preflight(config), write=lambda _: None)
    if wrap is not None:
        wrap(components)
    error, prints = None, None
    try:
        trainer.setup(components)
        trainer.train()
        if fingerprint:
            prints = components.actor.state_fingerprint()[0]
        if inspect is not None:
            inspect(components)
    except Exception as e:  # the caller checks it
        error = e
    finally:
        trainer.cleanup()
    return TrainerRun(trainer.history, trainer.val_images, prints, error, run_dir, ckpt_dir)


def same_metrics(a: dict[str, float], b: dict[str, float]) -> list[str]:
    """Keys whose values differ, timings, throughput and the per-stage FLOPs / MFU excepted.

    `perf/flops/*` count the stages a step ran (a fused old-log-prob pass or a separate rollout runs different
    stages with the same update) and `perf/mfu/*` divide by timings; `tests/trainer/test_flops.py` checks them.
    """
    skip = ("timing_s/", "timing_share/", "timing_per_image_ms/", "perf/throughput", "perf/flops/", "perf/mfu/")
    keys = sorted(set(a) | set(b))
    return [k for k in keys if not k.startswith(skip) and a.get(k) != b.get(k)]


@pytest.fixture
def trainer_run(tiny_qwen_image_path) -> Callable[..., TrainerRun]:
    """`trainer_run(folder, overrides, fingerprint=False, wrap=None)` on the session's tiny Qwen-Image."""

    def call(folder: pathlib.Path, overrides: list[str], **kwargs: Any) -> TrainerRun:
        return run_trainer(tiny_qwen_image_path, folder, overrides, **kwargs)

    return call


def assert_state_equal(a: dict, b: dict) -> None:
    """Two `state_fingerprint()`s are equal: global step, every trainable parameter, every trained param's AdamW state.

    A resumed optimizer also holds (all-zero) state for params that never got a gradient (the last block's unused text
    branch), which the straight run's AdamW never created: such state must be all zeros (its `step` aside).
    """
    import torch

    assert a["step"] == b["step"]
    assert a["model"].keys() == b["model"].keys()
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    common = a["optim"].keys() & b["optim"].keys()
    assert len(common) > 0
    for param in common:
        for key, value in a["optim"][param].items():
            assert torch.equal(value, b["optim"][param][key]), (param, key)
    for param in a["optim"].keys() ^ b["optim"].keys():
        state = a["optim"].get(param) or b["optim"][param]
        assert all(not torch.count_nonzero(v) for k, v in state.items() if k != "step"), param


@dataclasses.dataclass
class ResumeRuns:
    """The three runs of `straight_vs_resumed`: 3 steps straight; 2 steps with a checkpoint; the resumed 3rd step."""

    straight: TrainerRun
    first_two: TrainerRun
    resumed: TrainerRun


def assert_resume_matches_straight(runs: ResumeRuns, *, split_only: tuple[str, ...] = ()) -> None:
    """3 steps straight == 2 steps, stop, resume, 1 step: every step's metrics (`same_metrics`) and the final state
    (`assert_state_equal`) are identical.

    Args:
        runs (`ResumeRuns`): the finished runs; none may have failed.
        split_only (`tuple[str, ...]`, *optional*): prefixes of metric keys that only the split runs log (`async/`
            of separate mode, the 2-step run's final `val/`): a split row's key with such a prefix is not compared
            when the straight row lacks it; keys both rows have are always compared.
    """
    for name in ("straight", "first_two", "resumed"):
        run = getattr(runs, name)
        assert run.error is None, f"{name}: {run.error!r}"
    assert (len(runs.straight.history), len(runs.first_two.history), len(runs.resumed.history)) == (3, 2, 1)
    split = [*runs.first_two.history, *runs.resumed.history]
    for step, (a, b) in enumerate(zip(runs.straight.history, split, strict=True), start=1):
        b = {k: v for k, v in b.items() if k in a or not k.startswith(split_only)} if split_only else b
        assert same_metrics(a, b) == [], f"step {step}: {same_metrics(a, b)}"
    assert_state_equal(runs.straight.fingerprint, runs.resumed.fingerprint)


@pytest.fixture
def straight_vs_resumed(trainer_run) -> Callable[..., ResumeRuns]:
    """`straight_vs_resumed(folder, overrides, *, split_overrides=None, split_only=(), before_resume=None,
    model_path=None)`.

    Runs `overrides` 3 steps straight in `folder/straight`; then `split_overrides` (default `overrides`) 2 steps with
    a checkpoint at step 2 in `folder/split`, `before_resume(first_two)`, and a resume there to step 3. Asserts
    `assert_resume_matches_straight` (metrics of every step, parameters, AdamW state) and returns the runs for the
    test's own checks. The model is the session's tiny Qwen-Image unless `model_path` names another pipeline folder.
    """

    def call(
        folder: pathlib.Path,
        overrides: list[str],
        *,
        split_overrides: list[str] | None = None,
        split_only: tuple[str, ...] = (),
        before_resume: Callable[[TrainerRun], None] | None = None,
        model_path: pathlib.Path | None = None,
    ) -> ResumeRuns:
        split = overrides if split_overrides is None else split_overrides
        run = trainer_run if model_path is None else functools.partial(run_trainer, model_path)
        straight = run(folder / "straight", [*overrides, "trainer.total_training_steps=3"], fingerprint=True)
        assert straight.error is None, straight.error
        first_two = run(folder / "split", [*split, "trainer.total_training_steps=2", "trainer.save_freq=2"])
        assert first_two.error is None, first_two.error
        if before_resume is not None:
            before_resume(first_two)
        again = [*split, "trainer.total_training_steps=3", "trainer.resume_mode=auto"]
        runs = ResumeRuns(straight, first_two, run(folder / "split", again, fingerprint=True))
        assert_resume_matches_straight(runs, split_only=split_only)
        return runs

    return call


@pytest.fixture
def metric_diff() -> Callable[[dict, dict], list[str]]:
    """`metric_diff(a, b)`: keys whose values differ, timings excepted."""
    return same_metrics


@pytest.fixture
def fast_overrides() -> list[str]:
    """The `FAST` overrides (a fresh list)."""
    return list(FAST)


class KillServerAtStep:
    """Wraps the reward scorer of built components: at `step` it kills rollout server 0 (after that step's rollout).

    In separate mode the producer generates ahead, so the death is met by the rollout side as well.
    """

    def __init__(self, components: Any, step: int) -> None:
        self.inner, self.components, self.step = components.reward, components, step
        components.reward = self

    def score_records(self, images: Any, records: Any, *, step: int | None = None) -> Any:
        if step == self.step:
            import ray

            ray.kill(self.components.rollout.servers[0])
        return self.inner.score_records(images, records, step=step)

    def close(self) -> None:
        self.inner.close()


def _hang_weight_updates(server: Any) -> None:
    """Run inside rollout server 0's Ray actor: from now on its weight updates never finish (a hung engine)."""
    import asyncio

    async def hang(update: Any) -> None:
        await asyncio.sleep(3600)

    server._engine_begin_weights = hang


class HangServerAtStep(KillServerAtStep):
    """As `KillServerAtStep`, but rollout server 0 stays alive and hangs in its next weight updates."""

    def score_records(self, images: Any, records: Any, *, step: int | None = None) -> Any:
        if step == self.step:
            import sys

            import ray

            ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actor cannot import this module
            ray.get(self.components.rollout.servers[0].__ray_call__.remote(_hang_weight_updates), timeout=60)
        return self.inner.score_records(images, records, step=step)


@pytest.fixture
def kill_rollout_server_at(monkeypatch) -> Callable[..., None]:
    """`kill_rollout_server_at(step, hang=False)`: the next `build_components` wraps its reward in
    `KillServerAtStep(step)` (`HangServerAtStep` with `hang`)."""

    def arm(step: int, hang: bool = False) -> None:
        from verl_omni.trainer import components as components_module

        real_build = components_module.build_components

        def build_with_killer(prepared, **kwargs):
            built = real_build(prepared, **kwargs)
            (HangServerAtStep if hang else KillServerAtStep)(built, step=step)
            return built

        monkeypatch.setattr(components_module, "build_components", build_with_killer)

    return arm
