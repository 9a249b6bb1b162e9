"""Golden files: the old 571-key dump, a partial config with a defaults list, and the two old launch scripts."""

import os
import shutil
import subprocess

import pytest

from verl_migrate import migrate_script_text, migrate_yaml_text, translate_overrides, yaml_io
from verl_migrate.keys import head_defaults, is_head_key, old_defaults, parse_text, same_value
from verl_migrate.report import FileReport
from verl_migrate.script import commands
from verl_migrate.validate import check_keys
from verl_migrate.yamldoc import YamlDoc

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")
INPUTS = [
    "old_full_dump.yaml",
    "partial_with_defaults.yaml",
    "run_qwen_image_ocr_lora.sh",
    "run_flowgrpo_trainer_diffusers.sh",
]


def _read(name: str) -> str:
    with open(os.path.join(GOLDEN, name), encoding="utf-8") as fh:
        return fh.read()


def _migrated(name: str) -> str:
    stem, ext = os.path.splitext(name)
    return f"{stem}.migrated{ext}"


def _migrate(name: str, text: str):
    return (migrate_script_text if name.endswith(".sh") else migrate_yaml_text)(text, name)


def test_full_dump_fixture_is_the_old_key_list() -> None:
    doc = YamlDoc(yaml_io.load(_read("old_full_dump.yaml"), "x"), FileReport("x"))
    leaves = doc.leaves()
    assert len(leaves) == 571
    assert set(leaves) == set(old_defaults())
    for path in leaves:
        assert (
            same_value(doc.get(path), parse_text(old_defaults()[path])) or str(doc.get(path)) == old_defaults()[path]
        ), path


@pytest.mark.parametrize("name", INPUTS)
def test_golden_output(name: str) -> None:
    out, report = _migrate(name, _read(name))
    assert out == _read(_migrated(name))
    assert report.changed
    again, report2 = _migrate(name, out)
    assert again == out, "migrating twice differs from migrating once"
    assert not report2.changes


def test_full_dump_lands_on_the_verl_omni_tree() -> None:
    out, report = migrate_yaml_text(_read("old_full_dump.yaml"), "dump.yaml")
    doc = YamlDoc(yaml_io.load(out, "x"), FileReport("x"))
    leaves = set(doc.leaves())
    assert all(is_head_key(p) for p in leaves), sorted(p for p in leaves if not is_head_key(p))
    assert not [f for f in report.findings if f.category in ("unknown", "obsolete")]
    # every key that exists in both trees with the same default keeps its value
    for path, old in old_defaults().items():
        if path in leaves and same_value(old, head_defaults().get(path, "<absent>")):
            assert str(doc.get(path)) == old or same_value(doc.get(path), parse_text(old)), path
    for path in (
        "actor_rollout_ref.actor._target_",
        "actor_rollout_ref.rollout._target_",
        "actor_rollout_ref.model._target_",
        "algorithm._target_",
        "actor_rollout_ref.model.pipeline.height",
        "actor_rollout_ref.rollout.agent.default_agent_loop",
    ):
        assert str(doc.get(path)) == head_defaults()[path], path
    assert doc.get("actor_rollout_ref.model.algorithm") == "flow_grpo"
    assert doc.get("actor_rollout_ref.model.lora_rank") == 32  # the old value stays explicit
    assert doc.get("actor_rollout_ref.rollout.val_kwargs.pipeline.num_inference_steps") == 40
    assert not doc.has("critic") and not doc.has("reward_model") and not doc.has("custom_reward_function")
    dropped = {c.path for c in report.changes if c.action == "drop"}
    moved = {c.path for c in report.changes if c.action == "move"}
    assert set(old_defaults()) - leaves <= dropped | moved


@pytest.mark.parametrize("name", ["run_qwen_image_ocr_lora.sh", "run_flowgrpo_trainer_diffusers.sh"])
def test_scripts_match_verl_omni_recipes(name: str) -> None:
    out = _read(_migrated(name))
    assert "verl.trainer.main_flowgrpo" not in out and "python3 -m verl_omni.trainer.main_diffusion \\\n" in out
    for expected in (
        "actor_rollout_ref.model.algorithm=flow_grpo",
        "actor_rollout_ref.actor.diffusion_loss.loss_mode=flow_grpo",
        "actor_rollout_ref.rollout.pipeline.true_cfg_scale=4.0",
        'actor_rollout_ref.rollout.algo.sde_type="sde"',
        "actor_rollout_ref.rollout.val_kwargs.algo.noise_level=0.0",
        "actor_rollout_ref.rollout.val_kwargs.pipeline.num_inference_steps=",
        "reward.reward_manager.name=VisualRewardManager",
    ):
        assert expected in out, expected
    for gone in ("extra_configs", "custom_pipeline", "external_lib", "policy_loss", "adv_estimator", "=visual"):
        assert gone not in out, gone
    # the layout stays: same variable lines, one override per line, `$@` kept
    src = _read(name)
    assert [ln for ln in src.splitlines() if "=" in ln and not ln.startswith(" ")] == [
        ln for ln in out.splitlines() if "=" in ln and not ln.startswith(" ")
    ]
    assert out.rstrip().endswith("$@")


def test_scripts_shell_variables_untouched() -> None:
    out = _read(_migrated("run_flowgrpo_trainer_diffusers.sh"))
    for var in ('"${DATA_DIR}/train.parquet"', "${train_batch_size}", '"${TOKENIZER_PATH}"', "${max_prompt_length}"):
        assert var in out
    out = _read(_migrated("run_qwen_image_ocr_lora.sh"))
    assert "data.train_files=$ocr_train_path" in out and "reward.custom_reward_function.path=$reward_path" in out


@pytest.mark.parametrize("name", ["run_qwen_image_ocr_lora.sh", "run_flowgrpo_trainer_diffusers.sh"])
def test_script_and_translate_overrides_agree(name: str) -> None:
    old_words = commands(_read(name), name)[0]
    new_words = commands(_read(_migrated(name)), name)[0]
    assert translate_overrides(old_words).overrides == new_words
    report = FileReport(name)
    from verl_migrate.overridedoc import parse_override

    entries = [parse_override(w) for w in new_words]
    check_keys([(e.key, e.value, e.prefix) for e in entries if e.is_config], report)
    assert [f for f in report.findings if f.category == "error"] == []


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("name", ["run_qwen_image_ocr_lora.sh", "run_flowgrpo_trainer_diffusers.sh"])
def test_migrated_scripts_are_valid_bash(name: str) -> None:
    subprocess.run(["bash", "-n", os.path.join(GOLDEN, _migrated(name))], check=True, timeout=60)
