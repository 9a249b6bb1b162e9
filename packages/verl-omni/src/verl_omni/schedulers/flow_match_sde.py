"""Flow-matching SDE / CPS sampler with exact per-step Gaussian log-probabilities (the FlowGRPO policy).

The math is derived in docs/omni/math.md (§2 sde, §3 cps, §4 log-prob): step ``i`` maps a latent
``x`` at ``σ = sigmas[i]`` to ``x'`` at ``σ' = sigmas[i + 1]`` through a Gaussian ``N(μ, s²·I)`` whose mean is
linear in the velocity ``v``. Log-probs are the exact Gaussian log-density of ``x'`` reduced by the **mean** over
every non-batch element and are computed in at least float32 whatever the input dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from diffusers.configuration_utils import register_to_config
from diffusers.schedulers.scheduling_flow_match_euler_discrete import FlowMatchEulerDiscreteScheduler
from diffusers.utils import BaseOutput
from diffusers.utils.torch_utils import randn_tensor

from verl_omni.config.sampler import SDESamplerConfig, check_noise_level
from verl_omni.schedulers.settings import CPS_LOGPROBS, SDE_TYPES

__all__ = [
    "CPS_LOGPROBS",
    "SDE_TYPES",
    "FlowMatchSDEDiscreteScheduler",
    "FlowMatchSDESchedulerOutput",
    "gaussian_log_prob",
    "sde_transition",
]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass
class FlowMatchSDESchedulerOutput(BaseOutput):
    """Output of [`FlowMatchSDEDiscreteScheduler.step`].

    Args:
        prev_sample (`torch.Tensor` of shape `(batch_size, *latent_shape)`):
            The next latent `x'` in the dtype of `sample`: drawn as `μ + s·z` (`log_prob` scores this rounded
            value), or the given `prev_sample` when scoring (then detached).
        log_prob (`torch.Tensor` of shape `(batch_size,)`, float32, or `None`):
            Mean over latent elements of the Gaussian log-density of `prev_sample`; `None` when the step is
            deterministic (`noise_level == 0`, or a cps step onto `σ' = 0`) or `return_logprobs=False`.
        prev_sample_mean (`torch.Tensor` of shape `(batch_size, *latent_shape)`, float32):
            The transition mean `μ` (differentiable w.r.t. `model_output`).
        std_dev_t (`torch.Tensor` of shape `(batch_size,)`, float32):
            `σ_t = a·sqrt(σ/(1−σ̃))` for sde (NOT the transition std), the transition std `s` for cps and dance_sde.
        std (`torch.Tensor` of shape `(batch_size,)`, float32):
            The transition std `s` (per element), for both sde types.
    """

    prev_sample: torch.Tensor
    log_prob: torch.Tensor | None
    prev_sample_mean: torch.Tensor
    std_dev_t: torch.Tensor
    std: torch.Tensor


def _expand(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Reshape a per-row tensor `(B,)` (or a scalar) so it broadcasts against `like` `(B, ...)`."""
    if t.dim() == 0:
        return t
    return t.reshape(t.shape[0], *([1] * (like.dim() - 1)))


def sde_transition(
    sample: torch.Tensor,
    model_output: torch.Tensor,
    sigma: torch.Tensor,
    sigma_next: torch.Tensor,
    sigma_one: torch.Tensor,
    noise_level: float,
    sde_type: str = "sde",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return `(mean, s, std_dev_t)` of the Gaussian transition `x' ~ N(mean, s²)` for one flow step.

    Args:
        sample (`torch.Tensor` of shape `(B, ...)`): the latent `x` at `sigma`.
        model_output (`torch.Tensor` of shape `(B, ...)`): the (guided) velocity `v`.
        sigma (`torch.Tensor`, scalar or `(B,)`): current noise level `σ`.
        sigma_next (`torch.Tensor`, scalar or `(B,)`): next noise level `σ'`.
        sigma_one (`torch.Tensor`, scalar or `(B,)`): the second schedule sigma, used for `σ̃` when `σ == 1`.
        noise_level (`float`): `a`; 0 gives the exact Euler step.
        sde_type (`str`): `"sde"` (Flow-SDE), `"cps"` (coefficients-preserving sampling) or `"dance_sde"`
            (DanceGRPO: the `sde` mean with `std_dev_t := η`, step std `s = η·√(σ − σ')`, returned as `std_dev_t`).

    Returns:
        `(mean, s, std_dev_t)` where `s` and `std_dev_t` have the shape of `sigma`.
    """
    sig = _expand(sigma, sample)
    sig_next = _expand(sigma_next, sample)
    dt = sig_next - sig
    if noise_level == 0.0 and sde_type in SDE_TYPES:  # exact Euler step, bit-identical to the parent's step
        zero = torch.zeros_like(sigma)
        return sample + dt * model_output, zero, zero
    if sde_type == "sde":
        sig_tilde = torch.where(sigma == 1.0, sigma_one, sigma)
        std_dev_t = noise_level * torch.sqrt(sigma / (1.0 - sig_tilde))
        s = std_dev_t * torch.sqrt(sigma - sigma_next)
        sdt = _expand(std_dev_t, sample)
        mean = sample + dt * model_output + (sdt**2 * dt / (2.0 * sig)) * (sample + (1.0 - sig) * model_output)
        return mean, s, std_dev_t
    if sde_type == "cps":
        s = sigma_next * math.sin(noise_level * math.pi / 2.0)
        r = torch.sqrt(torch.clamp(sigma_next**2 - s**2, min=0.0))
        x0 = sample - sig * model_output
        x1 = sample + (1.0 - sig) * model_output
        mean = (1.0 - sig_next) * x0 + _expand(r, sample) * x1
        return mean, s, s
    if sde_type == "dance_sde":
        s = noise_level * torch.sqrt(sigma - sigma_next)
        mean = sample + dt * model_output + (noise_level**2 * dt / (2.0 * sig)) * (sample + (1.0 - sig) * model_output)
        return mean, s, s
    raise ValueError(f"sde_type: expected one of {SDE_TYPES}, got {sde_type!r}")


def gaussian_log_prob(
    prev_sample: torch.Tensor, mean: torch.Tensor, s: torch.Tensor, *, legacy: bool = False
) -> torch.Tensor:
    """Mean over non-batch elements of `log N(prev_sample; mean, s²)`, shape `(B,)`.

    With `legacy=True` returns the old cps value `-mean((x' - μ)²)` (a tempered ratio, factor `2s²`).
    """
    sq = (prev_sample - mean) ** 2
    dims = tuple(range(1, sq.dim()))
    if legacy:
        return -sq.mean(dim=dims)
    s_b = _expand(s, sq)
    lam = -sq / (2.0 * s_b**2) - torch.log(s_b) - _HALF_LOG_2PI
    return lam.mean(dim=dims)


class FlowMatchSDEDiscreteScheduler(FlowMatchEulerDiscreteScheduler):
    """`FlowMatchEulerDiscreteScheduler` whose `step` is a stochastic (sde / cps) transition with log-probs.

    Same schedule (`set_timesteps`, shifting) as the parent; `step` draws `x' = μ + s·z` (or scores a given
    `prev_sample`) and returns a [`FlowMatchSDESchedulerOutput`]. Steps are addressed by index
    (`step_index=`, or the scheduler's own counter started by `set_begin_index`), never by float equality.

    Args:
        noise_level (`float`, defaults to 1.0):
            Default `a` used when `step(noise_level=None)`. This default and the two below are
            `verl_omni.config.SDESamplerConfig`'s, the one home of the sampler settings.
        sde_type (`str`, defaults to `"sde"`):
            Default transition, `"sde"`, `"cps"` or `"dance_sde"`.
        cps_logprob (`str`, defaults to `"exact"`):
            `"exact"` Gaussian log-density, or `"legacy"` = `-mean((x'-μ)²)` as FG+/verl/verl-omni computed it.
        sde_window_size (`int`, defaults to 0):
            Number K of consecutive stochastic steps; 0 means all steps but the last.
        sde_window_range (`tuple[int, int]`, *optional*):
            `(r0, r1)`: the window start is drawn from `{r0, ..., r1 - K}`; defaults to `(0, N - 1)`.
        **kwargs: the parent's config (`shift`, `use_dynamic_shifting`, ...).

    Raises:
        ValueError: `noise_level < 0`, cps with `noise_level > 1`, an unknown `sde_type` or `cps_logprob`.
    """

    @register_to_config
    def __init__(
        self,
        num_train_timesteps: int = 1000,
        shift: float = 1.0,
        use_dynamic_shifting: bool = False,
        base_shift: float | None = 0.5,
        max_shift: float | None = 1.15,
        base_image_seq_len: int = 256,
        max_image_seq_len: int = 4096,
        invert_sigmas: bool = False,
        shift_terminal: float | None = None,
        use_karras_sigmas: bool = False,
        use_exponential_sigmas: bool = False,
        use_beta_sigmas: bool = False,
        time_shift_type: Literal["exponential", "linear"] = "exponential",
        stochastic_sampling: bool = False,
        noise_level: float = SDESamplerConfig.noise_level,
        sde_type: str = SDESamplerConfig.sde_type,
        cps_logprob: str = SDESamplerConfig.cps_logprob,
        sde_window_size: int = 0,
        sde_window_range: tuple[int, int] | None = None,
    ):
        super().__init__(
            num_train_timesteps=num_train_timesteps,
            shift=shift,
            use_dynamic_shifting=use_dynamic_shifting,
            base_shift=base_shift,
            max_shift=max_shift,
            base_image_seq_len=base_image_seq_len,
            max_image_seq_len=max_image_seq_len,
            invert_sigmas=invert_sigmas,
            shift_terminal=shift_terminal,
            use_karras_sigmas=use_karras_sigmas,
            use_exponential_sigmas=use_exponential_sigmas,
            use_beta_sigmas=use_beta_sigmas,
            time_shift_type=time_shift_type,
            stochastic_sampling=stochastic_sampling,
        )
        check_noise(noise_level, sde_type, key="noise_level")
        if cps_logprob not in CPS_LOGPROBS:
            raise ValueError(f"cps_logprob: expected one of {CPS_LOGPROBS}, got {cps_logprob!r}")
        if int(sde_window_size) < 0:
            raise ValueError(f"sde_window_size: expected an int >= 0, got {sde_window_size!r}")

    # ---- windows ------------------------------------------------------------------------------

    def sde_window(
        self,
        generator: torch.Generator | None = None,
        window_size: int | None = None,
        window_range: tuple[int, int] | None = None,
    ) -> tuple[int, int]:
        """Draw the stochastic window `[start, end)` of step indices for the current schedule.

        Args:
            generator (`torch.Generator`, *optional*): source of the start draw (uniform over allowed starts).
            window_size (`int`, *optional*): K; defaults to `config.sde_window_size`; 0 = steps `[0, N-1)`.
            window_range (`tuple[int, int]`, *optional*): `(r0, r1)`; defaults to `config.sde_window_range`.

        Returns:
            `(start, start + K)`.

        Raises:
            ValueError: `set_timesteps` was not called, or the window does not fit in the schedule
                (the message names `sde_window_size` / `sde_window_range`).
        """
        n = getattr(self, "num_inference_steps", None)
        if n is None:
            raise ValueError("call set_timesteps(...) before sde_window(...)")
        k = self.config.sde_window_size if window_size is None else int(window_size)
        rng = self.config.sde_window_range if window_range is None else window_range
        return draw_sde_window(n, k, rng, generator)

    # ---- step ---------------------------------------------------------------------------------

    def step(
        self,
        model_output: torch.Tensor,
        timestep: float | torch.Tensor,
        sample: torch.Tensor,
        s_churn: float = 0.0,
        s_tmin: float = 0.0,
        s_tmax: float = float("inf"),
        s_noise: float = 1.0,
        generator: torch.Generator | list[torch.Generator] | None = None,
        per_token_timesteps: torch.Tensor | None = None,
        return_dict: bool = True,
        *,
        noise_level: float | None = None,
        sde_type: str | None = None,
        prev_sample: torch.Tensor | None = None,
        return_logprobs: bool = True,
        step_index: int | torch.Tensor | None = None,
        cps_logprob: str | None = None,
    ) -> FlowMatchSDESchedulerOutput | tuple:
        """One stochastic transition `x -> x'`, or the score of a given `x'` (`prev_sample`, training path).

        Args:
            model_output (`torch.Tensor` of shape `(B, *latent_shape)`): the guided velocity `v`.
            timestep (`float` or `torch.Tensor`): kept for the parent signature; only its type is checked
                (integer timesteps are refused). The step is chosen by `step_index` / the internal counter.
            sample (`torch.Tensor` of shape `(B, *latent_shape)`): the current latent `x`.
            s_churn (`float`): unused (parent signature).
            s_tmin (`float`): unused (parent signature).
            s_tmax (`float`): unused (parent signature).
            s_noise (`float`): unused (parent signature).
            generator (`torch.Generator` or list of one per row, *optional*): noise source for `z`.
            per_token_timesteps: not supported (must be `None`).
            return_dict (`bool`, defaults to `True`): return the dataclass, else a tuple in field order.
            noise_level (`float`, *optional*): `a`; defaults to `config.noise_level`; 0 = Euler step.
            sde_type (`str`, *optional*): `"sde"` | `"cps"` | `"dance_sde"`; defaults to `config.sde_type`.
            prev_sample (`torch.Tensor` of shape `(B, *latent_shape)`, *optional*): when given, it is scored
                (detached) instead of drawing a new sample.
            return_logprobs (`bool`, defaults to `True`): compute `log_prob`.
            step_index (`int` or `torch.LongTensor` of shape `(B,)`, *optional*): the schedule index per row;
                when omitted the internal counter is used (started by `set_begin_index`) and advanced.
            cps_logprob (`str`, *optional*): `"exact"` | `"legacy"`; defaults to `config.cps_logprob`.

        Returns:
            [`FlowMatchSDESchedulerOutput`] or `tuple`.

        Raises:
            ValueError: integer `timestep`, shapes that disagree, `noise_level < 0`, cps with `noise_level > 1`,
                a step index outside the schedule, or no step index available.
        """
        if isinstance(timestep, int) or (
            isinstance(timestep, torch.Tensor) and not timestep.is_floating_point() and timestep.dim() == 0
        ):
            raise ValueError(
                "timestep: integer indices (e.g. from `enumerate(timesteps)`) are not timesteps; pass one of "
                "`scheduler.timesteps` and address the step with `step_index=i`"
            )
        if per_token_timesteps is not None:
            raise ValueError("per_token_timesteps: not supported by FlowMatchSDEDiscreteScheduler; pass None")
        a = float(self.config.noise_level if noise_level is None else noise_level)
        kind = self.config.sde_type if sde_type is None else sde_type
        mode = self.config.cps_logprob if cps_logprob is None else cps_logprob
        check_noise(a, kind, key="noise_level")
        if mode not in CPS_LOGPROBS:
            raise ValueError(f"cps_logprob: expected one of {CPS_LOGPROBS}, got {mode!r}")
        if model_output.shape != sample.shape:
            raise ValueError(
                f"model_output: shape {tuple(model_output.shape)} does not match sample {tuple(sample.shape)}"
            )
        if prev_sample is not None and prev_sample.shape != sample.shape:
            raise ValueError(
                f"prev_sample: shape {tuple(prev_sample.shape)} does not match sample {tuple(sample.shape)}"
            )

        use_counter = step_index is None
        idx = self._resolve_index(step_index, sample)
        out_dtype = sample.dtype
        cdtype = torch.promote_types(sample.dtype, torch.float32)
        x = sample.to(cdtype)
        v = model_output.to(cdtype)
        sigmas = self.sigmas.to(device=sample.device, dtype=cdtype)
        sigma, sigma_next = sigmas[idx], sigmas[idx + 1]
        sigma_one = sigmas[1]
        mean, s, std_dev_t = sde_transition(x, v, sigma, sigma_next, sigma_one, a, kind)
        batch = sample.shape[0]
        s = s.expand(batch) if s.dim() == 0 else s
        std_dev_t = std_dev_t.expand(batch) if std_dev_t.dim() == 0 else std_dev_t

        if prev_sample is None:
            if a == 0.0:
                x_next = mean.detach()
            else:
                z = randn_tensor(x.shape, generator=generator, device=x.device, dtype=cdtype)
                x_next = mean.detach() + _expand(s, x) * z
            # score the sample as returned (rounded to the input dtype): re-scoring it gives the same log-prob
            x_next = x_next.to(out_dtype).to(cdtype)
        else:
            x_next = prev_sample.detach().to(cdtype)

        log_prob = None
        deterministic = s == 0
        if return_logprobs and not bool(deterministic.all()):
            if bool(deterministic.any()):
                raise ValueError(
                    "step_index: some rows are deterministic (s = 0, e.g. a cps step onto sigma 0) and others are "
                    "not; their log-prob is undefined, score them separately"
                )
            log_prob = gaussian_log_prob(x_next, mean, s, legacy=(kind == "cps" and mode == "legacy"))
        if use_counter:
            self._step_index += 1
        x_next = x_next.to(out_dtype)
        if not return_dict:
            return (x_next, log_prob, mean, std_dev_t, s)
        return FlowMatchSDESchedulerOutput(
            prev_sample=x_next, log_prob=log_prob, prev_sample_mean=mean, std_dev_t=std_dev_t, std=s
        )

    def _resolve_index(self, step_index: int | torch.Tensor | None, sample: torch.Tensor) -> int | torch.Tensor:
        n = self.sigmas.numel() - 1
        if step_index is None:
            if self._step_index is None:
                if self._begin_index is None:
                    raise ValueError(
                        "step_index: not given and the scheduler has no running index; pass step_index=i or "
                        "call set_begin_index(0) after set_timesteps"
                    )
                self._step_index = self._begin_index
            step_index = self._step_index
        if isinstance(step_index, torch.Tensor):
            if step_index.is_floating_point() or step_index.dim() > 1:
                raise ValueError(f"step_index: expected an int or a LongTensor of shape (B,), got {step_index!r}")
            if step_index.dim() == 1 and step_index.shape[0] != sample.shape[0]:
                raise ValueError(f"step_index: {step_index.shape[0]} entries for a batch of {sample.shape[0]}")
            lo, hi = int(step_index.min()), int(step_index.max())
            idx: int | torch.Tensor = step_index.to(device=self.sigmas.device, dtype=torch.long)
        else:
            lo = hi = int(step_index)
            idx = int(step_index)
        if lo < 0 or hi >= n:
            raise ValueError(f"step_index: expected values in [0, {n - 1}] for a schedule of {n} steps, got {lo}..{hi}")
        return idx


check_noise = check_noise_level
"""Raise `ValueError` naming `key` unless `noise_level` is valid for `sde_type` (`verl_omni.config.sampler`)."""


def draw_sde_window(
    num_steps: int, window_size: int, window_range: tuple[int, int] | None, generator: torch.Generator | None
) -> tuple[int, int]:
    """Draw `(start, start + K)` with `start` uniform in `{r0, ..., r1 - K}`; K = 0 gives `(0, N - 1)`.

    `generator` is advanced only when there is a choice: K = 0 and a pinned range (`r1 - r0 == K`, one possible
    start) draw nothing, so a row's noise does not depend on whether its call drew a window from it.

    Raises:
        ValueError: `sde_window_size` < 0 or larger than the range, or `sde_window_range` outside `[0, N]`.
    """
    if window_size < 0:
        raise ValueError(f"sde_window_size: expected an int >= 0, got {window_size}")
    if window_size == 0:
        if window_range is not None:
            raise ValueError(f"sde_window_range: only used with sde_window_size > 0, got {tuple(window_range)}")
        return 0, max(num_steps - 1, 0)
    r0, r1 = (0, num_steps - 1) if window_range is None else (int(window_range[0]), int(window_range[1]))
    if not 0 <= r0 <= r1 <= num_steps:
        raise ValueError(
            f"sde_window_range: expected 0 <= r0 <= r1 <= num_inference_steps={num_steps}, got ({r0}, {r1})"
        )
    if window_size > r1 - r0:
        raise ValueError(
            f"sde_window_size: {window_size} steps do not fit in sde_window_range ({r0}, {r1}) "
            f"of a {num_steps}-step schedule"
        )
    if r1 - r0 == window_size:  # one possible start: a draw with one outcome consumes no randomness
        return r0, r1
    device = generator.device if generator is not None else "cpu"
    start = int(torch.randint(r0, r1 - window_size + 1, (1,), generator=generator, device=device).item())
    return start, start + window_size
