"""Other rollout keys.

Agent loop name, LLM-only rollout knobs, validation of `mode`, the SDE window and the prompt-embedding padding
(legacy_surface.md §3.4 rows 10, 21, §3.3(c), §3.6 items 5 and 7).
"""

from verl_migrate.kinds import Drop, Flag, RenameValue, SetExplicitDefault
from verl_migrate.rule_base import register
from verl_migrate.rules._targets import ROLLOUT

register(
    RenameValue(
        id="agent-loop-diffusion-default",
        since="0.1.0",
        summary="Agent loop `single_turn_agent` (the LLM loop) becomes `diffusion_single_turn_agent`.",
        refs=(21,),
        path=f"{ROLLOUT}.agent.default_agent_loop",
        old=("single_turn_agent",),
        new="diffusion_single_turn_agent",
    )
)

register(
    Drop(
        id="drop-rollout-llm-knobs",
        since="0.1.0",
        summary="LLM-only rollout knobs (response length, EOS, token budgets, multi-turn, tracing, ...) are gone.",
        paths=tuple(
            f"{ROLLOUT}.{k}"
            for k in (
                "response_length",
                "ignore_eos",
                "log_prob_micro_batch_size",
                "log_prob_use_dynamic_bsz",
                "log_prob_max_token_len_per_gpu",
                "do_sample",
                "over_sample_rate",
                "multi_stage_wake_up",
                "quantization_config_file",
                "qat",
                "multi_turn.max_assistant_turns",
                "multi_turn.tool_config_path",
                "multi_turn.max_user_turns",
                "multi_turn.max_parallel_calls",
                "multi_turn.max_tool_response_length",
                "multi_turn.tool_response_truncate_side",
                "multi_turn.use_inference_chat_template",
                "multi_turn.tokenization_sanity_check_mode",
                "multi_turn.format",
                "multi_turn.num_repeat_rollouts",
                "agent.agent_loop_config_path",
                "agent.custom_async_server",
                "trace",
                "prometheus.port",
                "prometheus.file",
                "prometheus.served_model_name",
            )
        ),
        note="the diffusion rollout does not read this LLM knob",
    )
)

register(
    Flag(
        id="rollout-mode-sync-rejected",
        since="0.1.0",
        summary="verl-omni's DiffusionRolloutConfig rejects `rollout.mode: sync`.",
        path=f"{ROLLOUT}.mode",
        condition="equals",
        values=("sync",),
        message="verl-omni only runs async rollouts; set `actor_rollout_ref.rollout.mode: async`",
    )
)

register(
    SetExplicitDefault(
        id="sde-window-range-default",
        since="0.1.0",
        summary="With an SDE window but no range, old pipelines used (0, 5); verl-omni's default range is null.",
        refs=(10,),
        path=f"{ROLLOUT}.algo.sde_window_range",
        value=[0, 5],
        requires=f"{ROLLOUT}.algo.sde_window_size",
        message="The default `sde_window_range` changed from the old pipeline's (0, 5) to null.",
    )
)

register(
    Drop(
        id="sde-window-range-without-size",
        since="0.1.0",
        summary="`sde_window_range` without `sde_window_size` was unused (every step but the last is stochastic).",
        refs=(9, 10),
        paths=(f"{ROLLOUT}.algo.sde_window_range",),
        unless_set=f"{ROLLOUT}.algo.sde_window_size",
        note="unused without `sde_window_size` (no window: every step but the last is stochastic), in old verl as "
        "in verl-omni",
    )
)

register(
    Flag(
        id="prompt-embed-padding-length",
        since="0.1.0",
        summary="Prompt embeddings pad to `rollout.pipeline.max_sequence_length`.",
        path=f"{ROLLOUT}.extra_configs.max_sequence_length",
        condition="absent",
        message="old verl padded prompt embeddings to `rollout.prompt_length` when `extra_configs.max_sequence_length` "
        "was unset; verl-omni pads them to `rollout.pipeline.max_sequence_length` (512)",
    )
)
