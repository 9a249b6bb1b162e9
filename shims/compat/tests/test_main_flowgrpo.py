"""`python -m verl.trainer.main_flowgrpo <old overrides>`: translated, reported, and trained by verl-omni."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl_compat import VerlDeprecationWarning
from verl_compat.main_flowgrpo import NEW_COMMAND, main, translate_argv

OLD = [
    line
    for line in (Path(__file__).parent / "legacy" / "old_e2e_overrides.txt").read_text().splitlines()
    if line and not line.startswith("#")
]


def test_old_overrides_are_translated_and_reported() -> None:
    new, text = translate_argv(["--config-name", "diffusion_trainer", *OLD, "trainer.totl_training_steps=1"])
    assert new[:2] == ["--config-name", "diffusion_trainer"]
    for word in (
        "actor_rollout_ref.model.algorithm=flow_grpo",
        "actor_rollout_ref.rollout.algo.noise_level=1.0",
        "actor_rollout_ref.rollout.pipeline.true_cfg_scale=4.0",
        "actor_rollout_ref.rollout.val_kwargs.algo.noise_level=0.0",
        "actor_rollout_ref.rollout.pipeline.num_inference_steps=4",
        "trainer.logger=[console]",
    ):
        assert word in new, word
    assert not any("extra_configs" in w or "external_lib" in w or "custom_pipeline" in w for w in new)
    # what disappears is said: rule drops, and old keys verl-omni's trainer has no setting for
    assert "drop          actor_rollout_ref.model.external_lib" in text
    assert "drop          actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu [1 -> -]" in text
    assert "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1" not in new
    # a key that never existed is not dropped: the trainer reports it with a suggestion
    assert "trainer.totl_training_steps=1" in new


@pytest.mark.ray
@pytest.mark.slow
def test_old_launch_command_trains_one_step(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "VERL_COMPAT_SILENT")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "verl.trainer.main_flowgrpo", *OLD, f"trainer.run_dir={tmp_path / 'run'}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stderr.count("verl-compat: old overrides translated by verl-migrate-config:") == 1
    assert "VerlDeprecationWarning: `python -m verl.trainer.main_flowgrpo` is deprecated" in proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["step"] == 1, rows


def test_hydra_flags_pass_through() -> None:
    new, _ = translate_argv(["--cfg", "job", "-cp", "/cfg", "trainer.total_training_steps=1"])
    assert new[:4] == ["--cfg", "-cp", "/cfg", "trainer.total_training_steps=1"]
    # no --config-name: old verl's diffusion_trainer, whose old default is kept explicitly (LoRA rank 32 -> 0)
    assert "actor_rollout_ref.model.lora_rank=32" in new
    new, _ = translate_argv(["-cn", "diffusion_trainer", "trainer.total_training_steps=1"])
    assert new[:2] == ["-cn", "diffusion_trainer"] and "actor_rollout_ref.model.lora_rank=32" in new


@pytest.mark.parametrize(
    "flags", [["--config-name", "quickstart"], ["--config-name=quickstart"], ["-cn", "quickstart.yaml"]]
)
def test_another_config_keeps_its_own_values_and_old_defaults_are_notes(flags: list[str]) -> None:
    from verl_omni.trainer.config import compose_config

    new, text = translate_argv([*flags, "trainer.total_training_steps=1"])
    assert new == [*flags, "trainer.total_training_steps=1"]
    assert "set-default" not in text and "Wrote `actor_rollout_ref.model.lora_rank: 32`" not in text
    assert "is not old verl's `diffusion_trainer`" in text
    assert "  note: actor_rollout_ref.model.lora_rank=32 — The default `lora_rank` changed from 32" in text
    cfg = compose_config(new[len(flags) :], config_name="quickstart", config_dir=None)
    assert cfg.actor_rollout_ref.model.lora_rank == 8  # the quickstart's own rank, not old verl's 32


def test_a_users_own_config_is_not_overridden_by_old_defaults(tmp_path: Path) -> None:
    old = ["-cp", str(tmp_path), "--config-name", "mine", "actor_rollout_ref.rollout.extra_configs.noise_level=0.9"]
    new, text = translate_argv(old)
    assert new == [*old[:4], "actor_rollout_ref.rollout.algo.noise_level=0.9"]  # translated, nothing appended
    assert "  note: actor_rollout_ref.rollout.val_kwargs.algo.noise_level=0.9 — " in text


def test_deprecation_names_the_command_the_script_migration_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    from verl_migrate.migrate import migrate_script_text

    script, _ = migrate_script_text("python3 -m verl.trainer.main_flowgrpo trainer.total_training_steps=1\n")
    written = script.split()[2]  # `python3 -m <module> …`: the module a migrated launch script runs
    monkeypatch.delenv("VERL_COMPAT_SILENT", raising=False)
    clash = ["actor_rollout_ref.rollout.extra_configs.noise_level=0.9", "actor_rollout_ref.rollout.algo.noise_level=1"]
    with pytest.warns(VerlDeprecationWarning) as caught:
        assert main(clash) == 2  # the translation refuses the clash: nothing trains
    text = str(caught[0].message)
    assert f"use `verl-omni-train` (or `python -m {written}`)" in text, text
    _, report = translate_argv(["trainer.total_training_steps=1"])
    assert f"runs `verl-omni-train` (`python -m {written}`)" in report
    assert f"new command: {NEW_COMMAND} trainer.total_training_steps=1" in report
