"""The engine calls that serve a batch of diffusers rollout jobs, and the trajectories they answer.

`DiffusersHttpServer` hands each batch the `Coalescer` forms to `run_jobs` on its engine thread: one job (a request
of `k` prompts) runs as its `segments`, one call in the usual case, row `r` using generator `seed + r`; several
one-prompt jobs of equal sampling (seed aside) share ONE call, row `r` of job `j` using generator `seed_j + r`, and
the trajectory is split back per job. `host_trajectories` then moves each job's rows to the CPU with the
conditioning of each prompt stored once (`to_host`).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl_omni.pipelines import make_generators
from verl_omni.rollout.diffusers.coalesce import Job, segments, split_rows
from verl_omni.rollout.diffusers.engine import DiffusersRolloutEngine

__all__ = ["host_trajectories", "run_jobs", "to_host"]


def run_jobs(engine: DiffusersRolloutEngine, jobs: list[Job]) -> list[TensorDict]:
    """Run `jobs` (one job, or one-prompt jobs of equal sampling but seed) on `engine`: one trajectory per job.

    Several jobs share one engine call, which stops early only when every job's flag is set; row `r` of job
    `j` uses generator `seed_j + r`. One job runs as its `segments` (one call for the usual multi-prompt
    request), its row `r` using generator `seed + r`. The trajectories stay on the engine's device.

    Raises:
        GenerationAborted: the call stopped early (every job of a shared call, or the one job, was aborted).
    """
    if len(jobs) == 1:
        return [_run_job(engine, jobs[0])]
    sampling, n = jobs[0].sampling, jobs[0].sampling.n
    generators = [g for job in jobs for g in make_generators(job.seed, n, engine.device)]
    trajectory = engine.generate(
        [job.prompts[0] for job in jobs],
        sampling,
        generators,
        should_abort=lambda: all(job.flag.is_set() for job in jobs),
    )
    return split_rows(trajectory, len(jobs), n)


def _run_job(engine: DiffusersRolloutEngine, job: Job) -> TensorDict:
    """One request's `len(prompts) * n` rows, prompt-major: one engine call per segment, concatenated."""
    n = job.sampling.n
    generators = make_generators(job.seed, job.images, engine.device)
    parts = []
    for start, stop, negative in segments(job):
        sampling = job.sampling.evolve(negative_prompt=negative)
        part = engine.generate(
            job.prompts[start:stop], sampling, generators[start * n : stop * n], should_abort=job.flag.is_set
        )
        if start:
            part.set("prompt_index", part.get("prompt_index") + start)
        parts.append(part)
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)


def host_trajectories(
    engine: DiffusersRolloutEngine, jobs: list[Job], parts: list[TensorDict]
) -> list[TensorDict | None]:
    """Each job's trajectory from `run_jobs` as the server answers it (`to_host`); None for a job aborted meanwhile."""
    adapter = engine.pipeline.adapter
    shared = (*adapter.cond_keys, *adapter.negative_cond_keys)
    return [
        None if job.flag.is_set() else to_host(part, shared, 1 if job.single else len(job.prompts))
        for job, part in zip(jobs, parts, strict=True)
    ]


def to_host(trajectory: TensorDict, shared_keys: tuple[str, ...], prompts: int) -> TensorDict:
    """The trajectory on the CPU, each prompt's conditioning `shared_keys` as one row expanded over its rows.

    Every row of one prompt encodes the same text, so its embeddings travel (and sit in host memory) once, as a
    stride-0 view. A one-prompt request keeps batch `[n]`; a prompt list (`prompts` = k) gets batch `[k, n]`, whose
    conditioning is `[k, 1, ...]` expanded over `n` (a flat `[k * n]` batch could not hold k rows expanded).
    """
    if prompts > 1 or trajectory.batch_dims > 1:
        trajectory = trajectory.reshape(prompts, -1)
    rows = trajectory.batch_dims
    shared = [k for k in shared_keys if k in trajectory.keys()]  # noqa: SIM118 - TensorDict refuses `in`
    out = trajectory.exclude(*shared).to("cpu")
    for key in shared:
        value = trajectory.get(key)
        out.set(key, value[(slice(None),) * (rows - 1) + (slice(0, 1),)].to("cpu", copy=True).expand(value.shape))
    return out
