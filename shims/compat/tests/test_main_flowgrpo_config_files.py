"""`python -m verl.trainer.main_flowgrpo` with old config files and old window settings (issue 32 items 1 and 7).

The user's config files are migrated by verl-migrate-config's rules into a temporary folder (never written), the
trainer runs on the migrated copies, and old defaults the files relied on (LoRA rank 32) are kept. The `ray`/`slow`
tests train one step of the tiny model on the CPU (about a minute each).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verl_compat import VerlDeprecationWarning
from verl_compat.main_flowgrpo import main, translate_argv

HERE = Path(__file__).parent
#: verl's old `diffusion_trainer.yaml` with the OCR recipe's settings and the two group files it composes
OCR_CONFIG = HERE.parents[2] / "tools" / "migrate-config" / "tests" / "pre6200" / "config"
OLD = [
    line
    for line in (HERE / "legacy" / "old_e2e_overrides.txt").read_text().splitlines()
    if line and not line.startswith("#")
]

#: a loose old config: layered on old verl's diffusion_trainer, a few keys set, LoRA rank left at the old default
LOOSE = """\
# my FlowGRPO run, written for verl before #6200
hydra:
  searchpath:
    - pkg://verl.trainer.config

defaults:
  - diffusion_trainer
  - _self_

actor_rollout_ref:
  actor:
    policy_loss:
      loss_mode: flow_grpo
  rollout:
    num_inference_steps: 3
    extra_configs:
      noise_level: 0.9
trainer:
  logger: console
"""


def _tiny(tmp: Path) -> list[str]:
    """Old-style overrides of one tiny CPU step that saves a checkpoint (nothing about LoRA)."""
    return [
        "actor_rollout_ref.model.path=tiny://qwen_image",
        "actor_rollout_ref.rollout.name=diffusers",
        "data.train_files=builtin://quickstart",
        "data.val_files=builtin://quickstart_val",
        "data.train_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.fsdp_config.param_offload=False",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.height=32",
        "actor_rollout_ref.rollout.width=32",
        "actor_rollout_ref.rollout.num_inference_steps=3",
        "+actor_rollout_ref.rollout.extra_configs.max_sequence_length=16",
        "reward.num_workers=1",
        "trainer.device=cpu",
        "trainer.logger=console",  # the OCR config logs to wandb too
        "trainer.n_gpus_per_node=1",
        "trainer.cpu_threads_per_worker=1",
        "trainer.total_training_steps=1",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=1",
        "trainer.resume_mode=disable",
        f"trainer.run_dir={tmp / 'run'}",
        f"trainer.default_local_dir={tmp / 'ckpt'}",
    ]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _load(new: list[str]):
    """The typed config `verl-omni-train` builds from the shim's argv (no worker starts)."""
    from verl_omni.trainer.config import load_config
    from verl_omni.trainer.main import parse_args

    args = parse_args(new)
    return load_config(args.overrides, config_name=args.config_name, config_dir=args.config_path)


# -- item 1: a window range without a window size ---------------------------------------------------------------


def test_a_window_range_without_a_size_is_dropped_with_a_note() -> None:
    new, text = translate_argv(["+actor_rollout_ref.rollout.extra_configs.sde_window_range=[0,5]"])
    assert not any("sde_window" in w for w in new), new
    assert "drop          actor_rollout_ref.rollout.algo.sde_window_range [[0,5] -> -]" in text
    assert "unused without `sde_window_size`" in text
    assert "sde_window_range" not in text.split("read these")[-1]  # a change, not a finding to read


def test_on_a_users_config_the_range_stays_for_the_config_to_decide(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(
        "defaults:\n  - diffusion_trainer\n  - _self_\nactor_rollout_ref:\n  rollout:\n    algo:\n"
        "      sde_window_size: 1\n"
    )
    word = "+actor_rollout_ref.rollout.extra_configs.sde_window_range=[0,2]"
    (tmp_path / "work").mkdir()
    new, _ = translate_argv(["-cp", str(tmp_path), "-cn", "mine", word], workdir=str(tmp_path / "work"))
    assert "actor_rollout_ref.rollout.algo.sde_window_range=[0,2]" in new  # the file's window size uses it


# -- item 7: config files of the user's ---------------------------------------------------------------------------


def test_a_loose_old_config_is_migrated_in_a_copy_with_lora_rank_32(tmp_path: Path) -> None:
    user = tmp_path / "cfg"
    user.mkdir()
    (user / "old.yaml").write_text(LOOSE)
    before = _snapshot(user)
    work = tmp_path / "work"
    work.mkdir()
    new, text = translate_argv(
        ["--config-path", str(user), "--config-name", "old", *_tiny(tmp_path)], workdir=str(work)
    )
    assert new[:4] == ["--config-path", str(work), "--config-name", "old"]
    (line,) = [x for x in text.splitlines() if x.startswith("verl-compat: deprecated:")]
    assert "verl-migrate-config" in line and str(user / "old.yaml") in line
    assert "actor_rollout_ref.model.lora_rank=32" not in new  # the migrated file holds the old default
    config = _load(new)
    assert config.actor_rollout_ref.model.lora_rank == 32
    assert config.actor_rollout_ref.actor.diffusion_loss.loss_mode == "flow_grpo"
    assert config.actor_rollout_ref.rollout.algo.noise_level == 0.9
    assert _snapshot(user) == before  # the user's files are only read


def test_the_old_ocr_root_config_and_its_group_files_are_composed(tmp_path: Path) -> None:
    if not OCR_CONFIG.is_dir():
        pytest.skip("the pre-#6200 look-alike configs of tools/migrate-config are not in this checkout")
    user = tmp_path / "cfg"
    shutil.copytree(OCR_CONFIG, user)
    (user / "model" / "diffusion_model.yaml").write_text(
        (user / "model" / "diffusion_model.yaml").read_text().replace("lora_alpha: 64", "lora_alpha: 48")
    )
    before = _snapshot(user)
    new, text = translate_argv(["-cp", str(user), *_tiny(tmp_path)], workdir=str(tmp_path / "work"))
    assert new[:4] == ["-cp", str(tmp_path / "work"), "--config-name", "diffusion_trainer_migrated"]
    for name in ("diffusion_trainer.yaml", "model/diffusion_model.yaml", "rollout/diffusion_rollout.yaml"):
        assert str(user / name) in text, name
    assert "has the same name" not in text and "no longer layers on" not in text  # the shim resolved both
    config = _load(new)
    model = config.actor_rollout_ref.model
    assert (model.lora_rank, model.lora_alpha) == (32, 48)  # the user's group file is composed, as in old verl
    assert config.trainer.experiment_name == "ocr"  # the primary's own keys
    assert _snapshot(user) == before


def test_a_config_migrated_by_the_tool_runs_from_its_own_folder(tmp_path: Path) -> None:
    from verl_migrate import migrate_yaml_text

    (tmp_path / "new.yaml").write_text(migrate_yaml_text(LOOSE, "old.yaml")[0])
    new, text = translate_argv(["-cp", str(tmp_path), "-cn", "new"], workdir=str(tmp_path / "unused"))
    assert new == ["-cp", str(tmp_path), "-cn", "new"] and "deprecated" not in text
    assert _load(new).actor_rollout_ref.model.lora_rank == 32


def test_a_config_file_the_rules_refuse_stops_with_its_name(tmp_path: Path, capsys) -> None:
    (tmp_path / "bad.yaml").write_text("trainer:\n  logger: console\n  logger: wandb\n")
    with pytest.warns(VerlDeprecationWarning):
        assert main(["-cp", str(tmp_path), "-cn", "bad"]) == 2
    err = capsys.readouterr().err
    assert "cannot translate the overrides or config files" in err and "bad.yaml" in err


# -- end to end: the old command trains --------------------------------------------------------------------------


def _train(cmd: list[str], tmp: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "VERL_COMPAT_SILENT")}
    env.update(OMP_NUM_THREADS="1", PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=420)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    rows = [json.loads(line) for line in (tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["step"] == 1, rows
    return proc.stderr


def _lora_ranks(tmp: Path) -> set[int]:
    """The LoRA ranks of the actor checkpoint written after the first step (DCP metadata: `lora_A` is [r, in])."""
    from torch.distributed.checkpoint import FileSystemReader

    meta = FileSystemReader(str(tmp / "ckpt" / "global_step_1" / "actor" / "model")).read_metadata()
    return {int(m.size[0]) for k, m in meta.state_dict_metadata.items() if "lora_A" in k and hasattr(m, "size")}


@pytest.mark.ray
@pytest.mark.slow
def test_old_script_with_a_window_range_and_no_size_trains(tmp_path: Path) -> None:
    script = tmp_path / "run_flowgrpo.sh"
    old = [w for w in OLD if "sde_window" not in w and not w.startswith("trainer.")]
    script.write_text(
        "#!/usr/bin/env bash\nset -e\n"
        f"{sys.executable} -m verl.trainer.main_flowgrpo \\\n"
        + "".join(f"    {w} \\\n" for w in old)
        + '    +actor_rollout_ref.rollout.extra_configs.sde_window_range="[0,5]" \\\n'
        + '    "$@"\n'
    )
    err = _train(["bash", str(script), *[w for w in _tiny(tmp_path) if w.startswith("trainer.")]], tmp_path)
    assert "expected null without a window size" not in err
    assert "drop          actor_rollout_ref.rollout.algo.sde_window_range" in err
    assert not [x for x in err.splitlines() if "WARNING" in x and "sde_window" in x]


@pytest.mark.ray
@pytest.mark.slow
def test_old_command_with_a_loose_old_config_trains_with_lora_rank_32(tmp_path: Path) -> None:
    user = tmp_path / "cfg"
    user.mkdir()
    (user / "old.yaml").write_text(LOOSE)
    cmd = [sys.executable, "-m", "verl.trainer.main_flowgrpo", "--config-path", str(user), "--config-name", "old"]
    err = _train([*cmd, *_tiny(tmp_path)], tmp_path)
    assert err.count("verl-compat: deprecated: old (pre-#6200) config files") == 1
    assert _lora_ranks(tmp_path) == {32}
    assert (user / "old.yaml").read_text() == LOOSE and sorted(os.listdir(user)) == ["old.yaml"]


@pytest.mark.ray
@pytest.mark.slow
def test_old_command_with_the_old_ocr_config_trains_with_lora_rank_32(tmp_path: Path) -> None:
    if not OCR_CONFIG.is_dir():
        pytest.skip("the pre-#6200 look-alike configs of tools/migrate-config are not in this checkout")
    before = _snapshot(OCR_CONFIG)
    cmd = [sys.executable, "-m", "verl.trainer.main_flowgrpo", "--config-path", str(OCR_CONFIG)]
    err = _train([*cmd, *_tiny(tmp_path)], tmp_path)
    assert err.count("verl-compat: deprecated: old (pre-#6200) config files") == 1
    assert _lora_ranks(tmp_path) == {32}
    assert _snapshot(OCR_CONFIG) == before
