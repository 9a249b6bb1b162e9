"""Legacy-style script: imports every old module the way pre-#6200 code did, checks the objects, prints OK."""

import importlib
import importlib.util
import pickle

import torch
import verl.trainer.diffusion.diffusion_algos as algos
from examples.flowgrpo_trainer.diffusers.qwen_image import QwenImage
from examples.flowgrpo_trainer.scheduler import FlowMatchSDEDiscreteScheduler, FlowMatchSDEDiscreteSchedulerOutput
from verl.experimental.agent_loop.single_turn_agent_loop import DiffusionSingleTurnAgentLoop
from verl.experimental.reward_loop.reward_manager.visual import VisualRewardManager
from verl.models.diffusers_model import DiffusionModelBase
from verl.models.diffusers_model.base import DiffusionModelBase as DiffusionModelBase2
from verl.trainer.config import DiffusionAlgoConfig
from verl.trainer.diffusion.diffusion_algos import (
    DiffusionAdvantageEstimator,
    compute_flow_grpo_outcome_advantage,
    compute_policy_loss_flow_grpo,
    kl_penalty_image,
)
from verl.utils.reward_score import default_compute_score_image
from verl.utils.reward_score.jpeg_compressibility import compute_score
from verl.utils.vllm_omni import VLLMOmniHijack
from verl.workers.config import DiffusionModelConfig, DiffusionRolloutConfig, DiffusionSamplingConfig
from verl.workers.engine.fsdp.diffusers_impl import DiffusersFSDPEngine

import verl_omni.algos as new_algos
from verl_compat._finder import _upstream_verl
from verl_omni.config import DiffusionModelConfig as NewModelConfig
from verl_omni.config import DiffusionRolloutConfig as NewRolloutConfig
from verl_omni.engine import DiffusersFSDPEngine as NewEngine
from verl_omni.models import DiffusionModelBase as NewBase
from verl_omni.models import QwenImageAdapter
from verl_omni.pipelines import DiffusionSamplingConfig as NewSampling
from verl_omni.reward import VisualRewardManager as NewVisual
from verl_omni.reward import default_compute_score_image as new_default_score
from verl_omni.reward.jpeg import compute_score as new_compute_score
from verl_omni.rollout.agent_loop import DiffusionAgentLoop
from verl_omni.rollout.vllm_omni.lora import VLLMOmniHijack as NewHijack
from verl_omni.rollout.vllm_omni.server import vLLMOmniHttpServer as NewServer
from verl_omni.schedulers import FlowMatchSDEDiscreteScheduler as NewScheduler
from verl_omni.schedulers import FlowMatchSDESchedulerOutput
from verl_omni.trainer.config import DiffusionAlgoConfig as NewAlgo

# upstream verl's real `verl.workers.rollout.vllm_rollout` package needs vllm (as old verl's did)
if not _upstream_verl() or importlib.util.find_spec("vllm") is not None:
    from verl.workers.rollout.vllm_rollout.vllm_omni_async_server import vLLMOmniHttpServer
else:
    vLLMOmniHttpServer = NewServer

# the same objects as the new paths
same = [
    (DiffusionModelConfig, NewModelConfig), (DiffusionRolloutConfig, NewRolloutConfig),
    (DiffusionSamplingConfig, NewSampling), (DiffusionAlgoConfig, NewAlgo), (DiffusersFSDPEngine, NewEngine),
    (DiffusionModelBase, NewBase), (DiffusionModelBase2, NewBase), (QwenImage, QwenImageAdapter),
    (VisualRewardManager, NewVisual), (default_compute_score_image, new_default_score),
    (compute_score, new_compute_score), (DiffusionSingleTurnAgentLoop, DiffusionAgentLoop),
    (VLLMOmniHijack, NewHijack), (vLLMOmniHttpServer, NewServer),
    (FlowMatchSDEDiscreteScheduler, NewScheduler), (FlowMatchSDEDiscreteSchedulerOutput, FlowMatchSDESchedulerOutput),
    (kl_penalty_image, new_algos.kl_penalty_historical),
]  # fmt: skip
for old, new in same:
    assert old is new, (old, new)

# isinstance agrees across old and new names
sched = FlowMatchSDEDiscreteScheduler()
assert isinstance(sched, NewScheduler) and isinstance(sched, FlowMatchSDEDiscreteScheduler)

# old call signature: response_mask still accepted, (advantages, returns) pair
rewards = torch.tensor([1.0, 2.0, 4.0, 8.0])
index = torch.tensor([0, 0, 1, 1])
mask = torch.ones(4, 3)
adv, ret = compute_flow_grpo_outcome_advantage(rewards, mask, index)
new = new_algos.compute_flow_grpo_advantages(rewards, index.tolist())
assert adv.shape == (4, 3) and torch.equal(adv, ret) and torch.allclose(adv[:, 0], new), (adv, new)


class OldActorConfig:
    clip_ratio = 0.2
    clip_ratio_high = 5.0


lp, olp = torch.tensor([[0.1, 0.2], [0.3, 0.0]]), torch.zeros(2, 2)
a = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
loss, metrics = compute_policy_loss_flow_grpo(olp, lp, a, torch.ones(2, 2), config=OldActorConfig())
ref = new_algos.flow_grpo_policy_loss(lp.reshape(-1), olp.reshape(-1), a.reshape(-1), clip_ratio=0.2, adv_clip_max=5.0)
assert torch.allclose(loss, ref.loss) and "actor/pg_clipfrac" in metrics

# the old enum, and a pickle written through the old path loads
assert DiffusionAdvantageEstimator.FLOW_GRPO == "flow_grpo"
old_pickle = b"cverl.trainer.diffusion.diffusion_algos\nDiffusionAdvantageEstimator\n(Vflow_grpo\ntR."
assert pickle.loads(old_pickle) is DiffusionAdvantageEstimator.FLOW_GRPO
cfg = NewAlgo()
data = pickle.dumps(cfg, protocol=0).replace(b"cverl_omni.trainer.config.algorithm\nDiffusionAlgoConfig",
                                             b"cverl.trainer.config.algorithm\nDiffusionAlgoConfig")  # fmt: skip
assert b"cverl.trainer.config.algorithm" in data
assert pickle.loads(data) == cfg

# importlib.reload of an old module works and still serves the names
assert importlib.reload(algos) is algos
assert algos.compute_flow_grpo_outcome_advantage is compute_flow_grpo_outcome_advantage
print("OK")
