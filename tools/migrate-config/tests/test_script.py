"""Launch-script rewriting: continuations, quotes, shell variables, prefixes and layout."""

import textwrap

import pytest

from verl_migrate import migrate_script_text
from verl_migrate.errors import MigrationError

TAIL = " actor_rollout_ref.model.lora_rank=8 actor_rollout_ref.rollout.val_kwargs.pipeline.num_inference_steps=4"


def _m(text: str) -> str:
    return migrate_script_text(textwrap.dedent(text))[0]


def test_single_line_with_env_prefix_and_quoted_args() -> None:
    out = _m(
        "HYDRA_FULL_ERROR=1 python3 -m verl.trainer.main_flowgrpo "
        '"+actor_rollout_ref.rollout.extra_configs.noise_level=1.2" '
        f"reward.reward_manager.name='visual'{TAIL} \"$@\"\n"
    )
    assert out == (
        "HYDRA_FULL_ERROR=1 python3 -m verl_omni.trainer.main_diffusion "
        '"actor_rollout_ref.rollout.algo.noise_level=1.2" '
        f"reward.reward_manager.name='VisualRewardManager'{TAIL} "
        'actor_rollout_ref.rollout.val_kwargs.algo.noise_level=1.2 "$@"\n'
    )


def test_dropping_the_last_line_moves_the_continuation() -> None:
    out = _m(
        f"""\
        python3 -m verl.trainer.main_flowgrpo \\
            trainer.nnodes=1{TAIL} \\
            trainer.balance_batch=True
        echo done
        """
    )
    assert out == f"python3 -m verl_omni.trainer.main_diffusion \\\n    trainer.nnodes=1{TAIL}\necho done\n"


def test_new_overrides_go_before_the_last_line() -> None:
    out = _m(
        """\
        python3 -m verl.trainer.main_flowgrpo \\
            actor_rollout_ref.rollout.val_kwargs.pipeline.num_inference_steps=4 \\
            trainer.nnodes=1 $@
        """
    )
    assert out == (
        "python3 -m verl_omni.trainer.main_diffusion \\\n"
        "    actor_rollout_ref.rollout.val_kwargs.pipeline.num_inference_steps=4 \\\n"
        "    actor_rollout_ref.model.lora_rank=32 \\\n"
        "    trainer.nnodes=1 $@\n"
    )


def test_shell_constructs_untouched() -> None:
    src = textwrap.dedent(
        f"""\
        # python3 -m verl.trainer.main_flowgrpo in a comment stays
        python3 -m verl.trainer.main_flowgrpo \\
            data.train_files="$(ls ${{DATA}}/*.parquet | head -1)" \\
            actor_rollout_ref.rollout.height=${{H:-256}} \\
            trainer.experiment_name=run_`date +%s`{TAIL}
        """
    )
    out = migrate_script_text(src)[0]
    assert out.startswith(
        "# python3 -m verl.trainer.main_flowgrpo in a comment stays\npython3 -m verl_omni.trainer.main_diffusion \\\n"
    )
    assert 'data.train_files="$(ls ${DATA}/*.parquet | head -1)"' in out
    assert "actor_rollout_ref.rollout.pipeline.height=${H:-256}" in out
    assert "trainer.experiment_name=run_`date +%s`" in out


def test_two_commands_in_one_script() -> None:
    out = _m(
        f"""\
        python3 -m verl.trainer.main_flowgrpo actor_rollout_ref.rollout.width=64{TAIL}
        python3 -m verl.trainer.main_flowgrpo actor_rollout_ref.rollout.width=128{TAIL} && echo ok
        """
    )
    assert out.count("python3 -m verl_omni.trainer.main_diffusion actor_rollout_ref.rollout.pipeline.width=") == 2
    assert out.rstrip().endswith("&& echo ok")


def test_scripts_without_the_old_entry_point_are_unchanged() -> None:
    text = "#!/bin/sh\npython3 -m other.module actor_rollout_ref.rollout.height=1\n"
    out, report = migrate_script_text(text)
    assert out is text and not report.changed


def test_unterminated_quote_is_an_input_error() -> None:
    with pytest.raises(MigrationError, match='unterminated " quote'):
        migrate_script_text('python3 -m verl.trainer.main_flowgrpo trainer.x="abc\n', "run.sh")


def test_unterminated_substitution_names_the_line_it_opens() -> None:
    text = "python3 -m verl.trainer.main_flowgrpo trainer.experiment_name=$(date \\\n  +%s\n"
    with pytest.raises(MigrationError, match=r"run\.sh:1: unterminated `\$\(` \(no matching `\)`\)"):
        migrate_script_text(text, "run.sh")


def test_interpreter_paths_and_flags() -> None:
    for head in ("/usr/bin/python3", "${VENV}/bin/python", "python3.11 -u", "nohup python3"):
        out = _m(f"{head} -m verl.trainer.main_flowgrpo actor_rollout_ref.rollout.width=64{TAIL}\n")
        # only the module name changes: the interpreter, its path and its flags stay as written
        assert out.startswith(f"{head} -m verl_omni.trainer.main_diffusion actor_rollout_ref.rollout.pipeline.width=64")


def test_dropping_the_last_lines_and_adding_overrides() -> None:
    out = _m(
        """\
        python3 -m verl.trainer.main_flowgrpo \\
            trainer.nnodes=1 \\
            trainer.balance_batch=True \\
            trainer.critic_warmup=0
        echo done
        """
    )
    assert out == (
        "python3 -m verl_omni.trainer.main_diffusion \\\n"
        "    actor_rollout_ref.model.lora_rank=32 \\\n"
        "    actor_rollout_ref.rollout.val_kwargs.pipeline.num_inference_steps=40 \\\n"
        "    trainer.nnodes=1\n"
        "echo done\n"
    )


def test_every_override_dropped() -> None:
    out = _m(
        """\
        python3 -m verl.trainer.main_flowgrpo \\
            trainer.balance_batch=True \\
            trainer.critic_warmup=0
        """
    )
    assert out == (
        "python3 -m verl_omni.trainer.main_diffusion actor_rollout_ref.model.lora_rank=32 "
        "actor_rollout_ref.rollout.val_kwargs.pipeline.num_inference_steps=40\n"
    )


def test_two_words_dropped_from_one_line() -> None:
    out = _m(
        "python3 -m verl.trainer.main_flowgrpo trainer.balance_batch=1 trainer.nnodes=1 "
        f"trainer.critic_warmup=0{TAIL}\n"
    )
    assert out == f"python3 -m verl_omni.trainer.main_diffusion trainer.nnodes=1{TAIL}\n"


def test_value_rules_follow_simple_shell_variables() -> None:
    src = textwrap.dedent(
        f"""\
        reward_path=examples/flowgrpo_trainer/reward_fn.py
        RM=visual
        STEPS=${{STEPS:-40}}
        LIB="examples.flowgrpo_trainer.diffusers.qwen_image"
        python3 -m verl.trainer.main_flowgrpo \\
            reward.custom_reward_function.path=$reward_path \\
            reward.reward_manager.name=$RM \\
            actor_rollout_ref.model.external_lib=${{LIB}} \\
            actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent{TAIL}
        """
    )
    out, report = migrate_script_text(src, "run.sh")
    # the assignment of a variable used once is rewritten; the override keeps `$RM`
    assert out.startswith("reward_path=examples/flowgrpo_trainer/reward_fn.py\nRM=VisualRewardManager\n")
    assert "    reward.reward_manager.name=$RM \\\n" in out
    # a value rule that drops the override drops it whatever spelled the value
    assert "external_lib" not in out
    (drop,) = [c for c in report.changes if c.rule_id == "drop-example-model-external-lib"]
    assert "value from `$LIB` (set on line 4)" in drop.note


def test_a_variable_used_twice_gets_the_literal_on_the_override() -> None:
    src = 'RM=visual\necho "manager: $RM"\npython3 -m verl.trainer.main_flowgrpo reward.reward_manager.name=$RM' + TAIL
    out, _ = migrate_script_text(src + "\n", "run.sh")
    assert out.startswith('RM=visual\necho "manager: $RM"\n')
    assert "reward.reward_manager.name=VisualRewardManager" in out


def test_a_default_in_a_variable_is_rewritten_in_place() -> None:
    src = 'RM="${RM:-visual}"\npython3 -m verl.trainer.main_flowgrpo reward.reward_manager.name=${RM}' + TAIL
    out, _ = migrate_script_text(src + "\n", "run.sh")
    assert out.startswith('RM="${RM:-VisualRewardManager}"\n')


def test_variables_assigned_twice_or_from_commands_are_not_followed() -> None:
    for head in ("RM=visual\nRM=naive\n", "RM=$(cat manager.txt)\n"):
        src = head + "python3 -m verl.trainer.main_flowgrpo reward.reward_manager.name=$RM" + TAIL + "\n"
        out, report = migrate_script_text(src, "run.sh")
        assert out.startswith(head) and "reward.reward_manager.name=$RM" in out
        assert not [c for c in report.changes if c.rule_id == "reward-manager-visual"]
