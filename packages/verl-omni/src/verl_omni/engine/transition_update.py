"""The FlowGRPO-family policy update: it trains on the stored SDE transitions (`LossSpec.trains_on == "transitions"`).

For each micro-batch and each trained window step one forward/backward runs the loss registered as
`actor.diffusion_loss.loss_mode` (`verl_omni.algos.get_loss`) on the transition the sampler took, scored by the model
adapter's `score_step` (`DiffusersFSDPEngine._score`). It registers itself as the engine's update for
`trains_on="transitions"`, as `engine/clean_update.py` and `engine/pair_update.py` do for theirs;
`DiffusersFSDPEngine.update_policy` documents the contract (keys read, metrics returned, errors).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl_omni.algos import PolicyLossInput, get_loss, loss_spec, rollout_consistency_metrics
from verl_omni.engine.batching import trained_rows
from verl_omni.engine.distributed import all_reduce_metrics
from verl_omni.engine.fsdp_engine import DiffusersFSDPEngine
from verl_omni.engine.metrics import accumulate_loss_output, update_metrics
from verl_omni.schedulers.settings import setting_name

__all__ = ["update_on_transitions"]


@DiffusersFSDPEngine.register_update("transitions")
def update_on_transitions(engine: DiffusersFSDPEngine, batch: TensorDict) -> dict[str, float]:
    """`DiffusersFSDPEngine.update_policy` for a loss on SDE transitions (FlowGRPO, GRPO-Guard, DanceGRPO, MixGRPO).

    Raises:
        ValueError: the loss needs another `sde_type`, a required key is missing, the batch does not split, or
            `old_log_probs` is missing and the update is not on-policy.
    """
    on_policy_old = "old_log_probs" not in batch
    loss_mode = engine.config.diffusion_loss.loss_mode
    spec = loss_spec(loss_mode)
    if spec.sde_types is not None:
        stored = setting_name("sde_type", batch["sde_type"][:1]) if "sde_type" in batch else None
        if stored not in spec.sde_types:
            raise ValueError(
                f"actor.diffusion_loss.loss_mode={loss_mode!r} holds only for rollout.algo.sde_type in "
                f"{list(spec.sde_types)}, but the batch was sampled with sde_type={stored!r}"
            )
    old_mean = "old_prev_sample_mean" in spec.needs
    need = ["advantages", "log_probs" if on_policy_old else "old_log_probs"]
    need += ["old_prev_sample_mean"] if old_mean and not on_policy_old else []
    need += ["ref_prev_sample_mean"] if engine.config.use_kl_loss else []
    missing = [k for k in need if k not in batch]
    if missing:
        raise ValueError(f"update_policy: batch lacks {missing}; it has {sorted(batch.keys())}")
    if on_policy_old:
        engine._check_on_policy(batch.batch_size[0])
    loss_fn = get_loss(loss_mode)
    k = batch["log_probs" if on_policy_old else "old_log_probs"].shape[1]
    own_old: list[torch.Tensor] = []  # on-policy: the detached log-probs of the update's own forwards
    own_rollout: list[torch.Tensor] = []  # and the rollout's log-probs of the same rows
    acc: dict[str, torch.Tensor] = {}
    n_terms = 0
    grad_norms = []
    lr = engine.optimizer.param_groups[0]["lr"]
    engine.module.train()
    for epoch in range(engine.config.ppo_epochs):
        for mini in engine._mini_batches(batch, epoch):
            mini_size = mini.batch_size[0]
            engine.optimizer.zero_grad(set_to_none=True)
            for micro in engine._micro_batches(mini, engine.config.ppo_micro_batch_size_per_gpu):
                micro = engine._to_device(micro, update=True)
                # each row trains k_train of its k steps (all k, or DanceGRPO's subset `train_step_mask`): a
                # step's loss (a mean over its rows) is weighted by rows / mini_size / k_train, so the optimizer
                # sees the mean over samples and their trained steps
                rows, k_train = trained_rows(micro, k)
                micro_old = []
                for j in range(k):
                    part = micro if rows[j] is None else micro[rows[j]]
                    if on_policy_old:
                        micro_old.append(micro["log_probs"].new_full((micro.batch_size[0],), float("nan")))
                    if part.batch_size[0] == 0:
                        continue
                    out = engine._score(part, j)
                    own = out.log_prob.detach().float()
                    if on_policy_old:
                        micro_old[j][slice(None) if rows[j] is None else rows[j].to(own.device)] = own
                    adv = part["advantages"]
                    res = loss_fn(
                        PolicyLossInput(
                            log_prob=out.log_prob,
                            old_log_prob=own if on_policy_old else part["old_log_probs"][:, j],
                            advantages=adv[:, j] if adv.ndim == 2 else adv,
                            prev_sample_mean=out.prev_sample_mean,
                            std_dev_t=out.std_dev_t,
                            std=out.std,
                            ref_prev_sample_mean=(
                                part["ref_prev_sample_mean"][:, j] if engine.config.use_kl_loss else None
                            ),
                            old_prev_sample_mean=(
                                None
                                if not old_mean
                                else out.prev_sample_mean.detach()
                                if on_policy_old
                                else part["old_prev_sample_mean"][:, j]
                            ),
                        ),
                        engine.config,
                    )
                    scale = part.batch_size[0] / mini_size / k_train * (engine.config.loss_scale_factor or 1.0)
                    (res.loss * scale).backward()
                    accumulate_loss_output(acc, res)
                    n_terms += 1
                if on_policy_old:
                    own_old.append(torch.stack(micro_old, dim=1))
                    own_rollout.append(micro["log_probs"])  # in the update's (possibly shuffled) row order
            lr = engine.optimizer.param_groups[0]["lr"]  # the lr this optimizer step uses
            grad_norms.append(engine._clip_and_step())
    metrics = update_metrics(acc, n_terms, grad_norms, lr)
    if "log_probs" in batch:
        old = torch.cat(own_old) if on_policy_old else batch["old_log_probs"]
        rollout = (torch.cat(own_rollout) if on_policy_old else batch["log_probs"]).to(old.device)
        # with a step subset (DanceGRPO) only trained steps have old log-probs (own: NaN, recomputed: 0 elsewhere)
        trained = ~torch.isnan(old)
        if not on_policy_old and "train_step_mask" in batch.keys():  # noqa: SIM118 - a TensorDict's keys
            trained = batch["train_step_mask"].to(old.device, torch.bool)
        diffs = rollout_consistency_metrics(old[trained], rollout[trained])  # own_old is on the device
        metrics["actor/rollout_logprob_diff_mean"] = diffs["rollout_logprob_diff_mean"]
        metrics["actor/rollout_logprob_diff_max"] = diffs["rollout_logprob_diff_max"]
    return all_reduce_metrics(metrics, engine.device)
