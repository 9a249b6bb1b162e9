"""MixGRPO-Flash's ODE steps: DPM-Solver++ on the flow-matching ODE and the compressed post-window grid.

On the rectified flow `x_σ = (1 − σ)·x₀ + σ·ε` the signal and noise scales are `α = 1 − σ` and `σ`, the half
log-SNR is `λ = log((1 − σ)/σ)`, and the model's data prediction is `x̂₀ = x − σ·v`. Integrating the ODE
`dx/dσ = v` exactly in `λ` with the data prediction held constant over a step gives DPM-Solver++(1):

    x' = (σ'/σ)·x + (1 − σ'/σ)·x̂₀  =  x + (σ' − σ)·v                    (the Euler step, exactly)

The 2nd-order multistep (2M, midpoint form) replaces `x̂₀` by a linear extrapolation in `λ` through the previous
step's data prediction `x̂₀⁻` (at `σ⁻`): with `h = λ(σ') − λ(σ)` and `r = (λ(σ) − λ(σ⁻))/h`,

    D = x̂₀ + (x̂₀ − x̂₀⁻)/(2r),      x' = (σ'/σ)·x + (1 − σ'/σ)·D

It falls back to the first order when there is no previous step of the same ODE path (the first ODE step, the first
after an SDE step), when the previous step started at `σ⁻ = 1` (`λ = −∞`) and on the step to `σ' = 0` (`λ = ∞`).
docs/omni/math.md §11 has the derivation and the measured order.
"""

from __future__ import annotations

import math

import torch

from verl_omni.config.sampler import DPM_ALGORITHM_TYPES, DPM_APPLY_STRATEGIES

__all__ = [
    "DPM_ALGORITHM_TYPES",
    "DPM_APPLY_STRATEGIES",
    "FlowMatchDPMSolver",
    "dpmpp_2m_update",
    "post_window_sigmas",
]

# DPM_ALGORITHM_TYPES, DPM_APPLY_STRATEGIES: defined with the other sampler settings in verl_omni.config.sampler


def _half_log_snr(sigma: float) -> float:
    return math.log((1.0 - sigma) / sigma)


def dpmpp_2m_update(
    sample: torch.Tensor,
    x0: torch.Tensor,
    prev_x0: torch.Tensor,
    sigma_prev: float,
    sigma: float,
    sigma_next: float,
) -> torch.Tensor:
    """One DPM-Solver++(2M) step from `σ` to `σ'` (all three in (0, 1), decreasing).

    Args:
        sample (`torch.Tensor`): `x` at `σ`.
        x0 (`torch.Tensor`): the data prediction `x − σ·v` at `σ`.
        prev_x0 (`torch.Tensor`): the data prediction of the previous step of the same ODE path, at `σ⁻`.
        sigma_prev (`float`): `σ⁻`, where `prev_x0` was predicted.
        sigma (`float`): `σ`, where `x0` was predicted (`σ⁻ > σ`).
        sigma_next (`float`): `σ'`, the target (`σ > σ' > 0`).

    Returns:
        `torch.Tensor`: `x'` at `σ'`, the dtype of the inputs.

    Raises:
        ValueError: the sigmas are not decreasing inside (0, 1).
    """
    if not 1.0 > sigma_prev > sigma > sigma_next > 0.0:
        raise ValueError(f"dpmpp_2m_update: expected 1 > σ⁻ > σ > σ' > 0, got {sigma_prev}, {sigma}, {sigma_next}")
    lam_prev, lam, lam_next = _half_log_snr(sigma_prev), _half_log_snr(sigma), _half_log_snr(sigma_next)
    r = (lam - lam_prev) / (lam_next - lam)
    d = x0 + (x0 - prev_x0) / (2.0 * r)
    ratio = sigma_next / sigma
    return ratio * sample + (1.0 - ratio) * d


class FlowMatchDPMSolver:
    """DPM-Solver++ of order 1 or 2 along one ODE path; keeps the previous data prediction between calls.

    Args:
        order (`int`): 1 (= Euler) or 2 (the 2M multistep).

    Raises:
        ValueError: an order other than 1 or 2.
    """

    def __init__(self, order: int = 2) -> None:
        if order not in (1, 2):
            raise ValueError(f"rollout.algo.dpm_solver_order: expected 1 or 2, got {order!r}")
        self.order = order
        self._prev: tuple[float, torch.Tensor] | None = None

    def reset(self) -> None:
        """Forget the previous step: the next step starts a new ODE path (e.g. after an SDE step)."""
        self._prev = None

    def step(self, model_output: torch.Tensor, sample: torch.Tensor, sigma: float, sigma_next: float) -> torch.Tensor:
        """One ODE step from `σ` to `σ'` with velocity `model_output` at (`sample`, `σ`).

        Computed in float32 (float64 for float64 inputs).

        Returns:
            `torch.Tensor`: `x'` at `σ'`, in `sample`'s dtype.
        """
        dtype = torch.promote_types(sample.dtype, torch.float32)
        x = sample.to(dtype)
        v = model_output.to(dtype)
        x0 = x - sigma * v
        prev, self._prev = self._prev, (sigma, x0)
        if self.order == 1 or prev is None or prev[0] >= 1.0 or sigma_next <= 0.0:
            out = x + (sigma_next - sigma) * v
        else:
            out = dpmpp_2m_update(x, x0, prev[1], prev[0], sigma, sigma_next)
        return out.to(sample.dtype)


def post_window_sigmas(sigmas: torch.Tensor, start: int, ratio: float) -> torch.Tensor:
    """The compressed grid after the SDE window: `σ[start] → 0` in `m = max(1, round((N − start)·ratio))` steps.

    The points sit at equal spacing in the sampler's step index (`start + j·(N − start)/m`, `j = 0 .. m`), the
    sigmas read off the original grid by linear interpolation between its points, so the ends are exact and the
    model's shift is kept.

    Args:
        sigmas (`torch.Tensor` of shape `(N + 1,)`): the sampler's grid, decreasing to `σ_N = 0`.
        start (`int`): the first step after the window, `0 <= start < N`.
        ratio (`float`): `rollout.algo.dpm_post_compress_ratio`, in (0, 1].

    Returns:
        `torch.Tensor` of shape `(m + 1,)`, float64 on the CPU.

    Raises:
        ValueError: `start` outside `[0, N)` or `ratio` outside (0, 1].
    """
    n = sigmas.numel() - 1
    if not 0 <= start < n:
        raise ValueError(f"post_window_sigmas: start {start} outside [0, {n})")
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"rollout.algo.dpm_post_compress_ratio: expected a float in (0, 1], got {ratio!r}")
    grid = sigmas.detach().double().cpu()
    m = max(1, round((n - start) * ratio))
    pos = torch.linspace(float(start), float(n), m + 1, dtype=torch.float64)
    low = pos.floor().long().clamp(max=n - 1)
    frac = pos - low
    return grid[low] + frac * (grid[low + 1] - grid[low])
