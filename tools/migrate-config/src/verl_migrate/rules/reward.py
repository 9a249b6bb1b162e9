"""Reward manager.

`visual` is no longer a registry name; verl-omni loads `VisualRewardManager` by importlib (verl-omni 094f1323 and
dd260ab9, legacy_surface.md §2 and §3.4 rows 35-37).
"""

from verl_migrate.kinds import Drop, Flag, RenameValue
from verl_migrate.rule_base import register

_RM = "reward.reward_manager"
#: upstream's importlib reward manager; this project's trainer keeps the registry name `visual` (rules skipped)
_IMPORTLIB = ((f"{_RM}.source", "importlib"),)

register(
    RenameValue(
        id="reward-manager-visual",
        since="0.1.0",
        summary="Reward manager `visual` (registry) is now `VisualRewardManager` loaded by importlib.",
        refs=(35,),
        when_target=_IMPORTLIB,
        path=f"{_RM}.name",
        old=("visual",),
        new="VisualRewardManager",
        also_set=((f"{_RM}.source", "importlib"), (f"{_RM}.module.path", "pkg://verl_omni.reward_loop.reward_manager")),
    )
)

register(
    Drop(
        id="drop-reward-manager-module-name",
        since="0.1.0",
        summary="`reward.reward_manager.module.name` is gone; the importlib class name is `reward_manager.name`.",
        refs=(36,),
        paths=(f"{_RM}.module.name",),
        note="verl-omni reads the class name from `reward.reward_manager.name`",
    )
)

register(
    Flag(
        id="reward-manager-naive",
        since="0.1.0",
        summary="The dumped default reward manager `naive` scores text; diffusion runs use `VisualRewardManager`.",
        refs=(35,),
        when_target=_IMPORTLIB,
        path=f"{_RM}.name",
        condition="equals",
        values=("naive",),
        message="`naive` (source `register`) is verl's LLM reward manager and scores text, not images; verl-omni's "
        "default is `name: VisualRewardManager`, `source: importlib`, `module.path: "
        "pkg://verl_omni.reward_loop.reward_manager`",
    )
)

register(
    Drop(
        id="drop-reward-model-rollout-name-missing",
        since="0.2.0",
        summary="verl's mandatory `reward.reward_model.rollout.name: ???` goes; the reward model defaults to `hf`.",
        refs=(38,),
        when_target=(("reward._target_", "verl_omni.reward.RewardConfig"),),
        paths=("reward.reward_model.rollout.name",),
        when=("???",),
        note="the reward model's servers default to verl-core's `hf` backend; set `vllm` when you enable it on GPUs",
    )
)

register(
    RenameValue(
        id="reward-fn-ocr-builtin",
        since="0.2.0",
        summary="verl's OCR reward file (deleted by #6200) becomes this project's built-in `ocr` reward module.",
        refs=(37,),
        # this project's trainer ships `compute_score_ocr` (same signature) in `verl_omni.reward.ocr`
        when_target=(("reward._target_", "verl_omni.reward.RewardConfig"),),
        path="reward.custom_reward_function.path",
        old=(
            "examples/flowgrpo_trainer/reward_fn.py",
            "verl_omni/utils/reward_score/genrm_ocr.py",
            "pkg://verl_omni.utils.reward_score.genrm_ocr",
        ),
        new="pkg://verl_omni.reward.ocr",
    )
)

register(
    RenameValue(
        id="reward-manager-naive-to-visual",
        since="0.2.0",
        summary="verl's text reward manager `naive` (dumped default) becomes this project's image manager `visual`.",
        refs=(35,),
        # this project's trainer keeps the registry name `visual` and refuses `naive`
        when_target=((f"{_RM}.name", "visual"),),
        path=f"{_RM}.name",
        old=("naive",),
        new="visual",
    )
)
