"""Reward manager.

`visual` is no longer a registry name; verl-omni loads `VisualRewardManager` by importlib (verl-omni 094f1323 and
dd260ab9, legacy_surface.md §2 and §3.4 rows 35-37).
"""

from verl_migrate.kinds import Drop, Flag, RenameValue
from verl_migrate.rules.base import register

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
    Flag(
        id="reward-fn-example-path",
        since="0.1.0",
        summary="The OCR reward example left verl; this project ships no OCR reward (keep your own copy).",
        refs=(37,),
        path="reward.custom_reward_function.path",
        condition="equals",
        values=("examples/flowgrpo_trainer/reward_fn.py",),
        message="`examples/flowgrpo_trainer/reward_fn.py` was deleted from verl by #6200 and this project ships no "
        "OCR reward; point this at your own copy of that file (its `compute_score_ocr` signature is accepted as is)",
        late=True,
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
