"""`DiffusionSamplingConfig`: the sampling parameters of one generate call (rollout and log-prob pipelines).

Its home is the config layer (the rollout config builds it); `verl_omni.pipelines.config` re-exports it.
"""

from __future__ import annotations

import dataclasses

from verl_omni.config.sampler import DPM_ALGORITHM_TYPES, DPM_APPLY_STRATEGIES, SDESamplerConfig

__all__ = ["DiffusionSamplingConfig"]


@dataclasses.dataclass
class DiffusionSamplingConfig(SDESamplerConfig):
    """Sampling parameters; defaults follow the shape of the published Qwen-Image FlowGRPO recipe.

    Args:
        n (`int`, defaults to 1): images per prompt (group size).
        num_inference_steps (`int`, defaults to 10): N.
        height, width (`int`, defaults to 512): image size in pixels.
        num_frames (`int`, defaults to 1): frames per sample; video models only (Wan: `4k + 1`, e.g. 81), image
            models refuse any other value than 1.
        noise_level (`float`, defaults to 1.0): `a` inside the SDE window (0 = ODE everywhere); default and check
            in `verl_omni.config.SDESamplerConfig` (the trainer fills it from `rollout.algo.noise_level`).
        sde_type (`str`, defaults to `"sde"`): `"sde"` or `"cps"` (`SDESamplerConfig`).
        cps_logprob (`str`, defaults to `"exact"`): `"exact"` or `"legacy"` (tempered, factor 2s²; `SDESamplerConfig`).
        sde_window_size (`int`, defaults to 0): K stochastic steps; 0 = all steps but the last.
        sde_window_range (`list[int]`, *optional*): `[r0, r1]`, window start drawn from `{r0 .. r1-K}`;
            defaults to `[0, N-1]`.
        sde_window_per_row (`bool`, defaults to False): draw one window per row from that row's generator
            (verl-omni behaviour) instead of one per call; needs per-row generators (`seed` or a list).
        init_same_noise (`bool`, defaults to False): DanceGRPO's shared initial noise: the `n` rows of each prompt
            start from the x_T of the prompt's first row (every row still draws its own, so the SDE noise of each
            row is the same as without sharing).
        guidance_scale (`float`, defaults to 1.0): CFG weight (SD3 CFG / Qwen-Image true CFG); `<= 1` disables.
        negative_prompt (`str`, *optional*): negative prompt used when guidance is on; None = the model's
            default (`" "` for Qwen-Image as in its examples, `""` for SD3 as in FlowGRPO).
        max_sequence_length (`int`, defaults to 256): text tokens the prompt embeddings are padded to.
        seed (`int`, *optional*): row `r` of a call uses `torch.Generator().manual_seed(seed + r)`; when None
            the caller passes generators.
        calculate_log_probs (`bool`, defaults to True): record the SDE window (latents, log-probs). False: every
            step is an exact Euler (ODE) step, and the trajectory holds only the final clean latents
            (`latents_clean`), the timestep grid and the prompt embeddings (for a loss on clean samples,
            `diffusion_nft`); `noise_level` and the window settings are then not used.
        dpm_algorithm_type (`str`, *optional*): MixGRPO-Flash: `"dpmsolver++"` takes the ODE steps outside the SDE
            window with DPM-Solver++ (`verl_omni.schedulers.flow_match_dpm`); None = Euler. Only with a window
            (`calculate_log_probs` and `noise_level > 0`; validation at noise 0 stays Euler) and one window per call.
        dpm_apply_strategy (`str`, defaults to `"post"`): `"post"`: the steps after the window, on a grid compressed by
            `dpm_post_compress_ratio` (the steps before it stay Euler); `"all"`: every ODE step, on the sampler's grid.
        dpm_post_compress_ratio (`float`, defaults to 0.4): `"post"`: the `R` steps after the window become
            `max(1, round(R * ratio))`, in (0, 1].
        dpm_solver_order (`int`, defaults to 2): 1 (= Euler) or 2 (the 2M multistep).

    Raises:
        ConfigValueError: a value out of range (the message names the key, the value and what is allowed).
    """

    n: int = 1
    num_inference_steps: int = 10
    height: int = 512
    width: int = 512
    num_frames: int = 1
    sde_window_size: int = 0
    sde_window_range: list[int] | None = None
    sde_window_per_row: bool = False
    init_same_noise: bool = False
    guidance_scale: float = 1.0
    negative_prompt: str | None = None
    max_sequence_length: int = 256
    seed: int | None = None
    calculate_log_probs: bool = True
    dpm_algorithm_type: str | None = None
    dpm_apply_strategy: str = "post"
    dpm_post_compress_ratio: float = 0.4
    dpm_solver_order: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("n", self.n >= 1, "an int >= 1")
        self._require("num_inference_steps", self.num_inference_steps >= 1, "an int >= 1")
        self._require("height", self.height >= 16, "an int >= 16")
        self._require("width", self.width >= 16, "an int >= 16")
        self._require("num_frames", self.num_frames >= 1, "an int >= 1")
        n = self.num_inference_steps
        self._require("sde_window_size", 0 <= self.sde_window_size <= n, f"an int in [0, num_inference_steps={n}]")
        if self.sde_window_range is None:
            self._require(
                "sde_window_size", self.sde_window_size <= n - 1, f"an int <= num_inference_steps - 1 = {n - 1}"
            )
        else:
            rng = self.sde_window_range
            ok = len(rng) == 2 and 0 <= rng[0] <= rng[1] <= n
            self._require("sde_window_range", ok, f"[r0, r1] with 0 <= r0 <= r1 <= num_inference_steps={n}")
            self._require(
                "sde_window_size",
                self.sde_window_size > 0 and self.sde_window_size <= rng[1] - rng[0],
                f"an int in [1, r1 - r0 = {rng[1] - rng[0]}] when sde_window_range is set",
            )
            if self.sde_type == "cps" and self.noise_level > 0:
                # the last cps step is deterministic (s = 0): its log-prob is undefined
                self._require("sde_window_range", rng[1] <= n - 1, f"r1 <= num_inference_steps - 1 = {n - 1} for cps")
        self._require("guidance_scale", self.guidance_scale >= 0, "a float >= 0")
        self._check_dpm()
        self._require("max_sequence_length", 1 <= self.max_sequence_length <= 1024, "an int in [1, 1024]")

    def _check_dpm(self) -> None:
        """MixGRPO-Flash's keys: known values, and a rollout they apply to."""
        types = (None, *DPM_ALGORITHM_TYPES)
        self._require("dpm_algorithm_type", self.dpm_algorithm_type in types, f"one of {types}")
        strategies = DPM_APPLY_STRATEGIES
        self._require("dpm_apply_strategy", self.dpm_apply_strategy in strategies, f"one of {strategies}")
        ratio = self.dpm_post_compress_ratio
        self._require("dpm_post_compress_ratio", 0 < ratio <= 1, "a float in (0, 1]")
        self._require("dpm_solver_order", self.dpm_solver_order in (1, 2), "1 or 2")
        if self.dpm_algorithm_type is not None:
            self._require(
                "dpm_algorithm_type",
                self.calculate_log_probs and not self.sde_window_per_row,
                "null with calculate_log_probs=false (no SDE window: a loss on clean samples) or sde_window_per_row "
                "(one window per row)",
            )

    @property
    def do_cfg(self) -> bool:
        """Whether classifier-free guidance is on (`guidance_scale > 1`)."""
        return self.guidance_scale > 1
