"""DanceGRPO's shared initial noise (`init_same_noise`) in the one sampling loop, on the tiny Qwen-Image."""

import torch

PROMPTS = ["a cat on a red chair", "two dogs in the snow"]


def test_shared_initial_noise_gives_each_group_one_x_T_and_keeps_every_rows_sde_noise(
    tiny_qwen_image_pipe, tiny_sampling_config
):
    """n=3 rows per prompt, every step SDE: with `init_same_noise` the rows of a prompt start from its first row's
    x_T and then part (their own SDE noise); the first row of each group is the same run as without sharing.

    Mutation run by hand: the shared draw taken per row (`latents[::n]` replaced by `latents`): FAILED (x_T of a
    group's rows differ)."""
    cfg = tiny_sampling_config.evolve(seed=11, n=3, noise_level=1.0)
    alone = tiny_qwen_image_pipe.generate_with_logprob(PROMPTS, cfg).trajectory
    shared = tiny_qwen_image_pipe.generate_with_logprob(PROMPTS, cfg.evolve(init_same_noise=True)).trajectory
    x_t = shared["latents"][:, 0]  # no window: the trajectory starts at step 0, x_T
    for group in (slice(0, 3), slice(3, 6)):
        first = x_t[group][0]
        assert all(torch.equal(row, first) for row in x_t[group])
        after = shared["latents"][group, 1]  # one SDE step later the rows differ
        assert not torch.equal(after[0], after[1]) and not torch.equal(after[1], after[2])
    assert not torch.equal(x_t[0], x_t[3])  # two prompts, two draws
    for row in (0, 3):  # a group's first row: its own x_T and its own SDE noise, as without sharing
        assert torch.equal(shared["latents"][row], alone["latents"][row])
        assert torch.equal(shared["log_probs"][row], alone["log_probs"][row])
    assert not torch.equal(alone["latents"][1, 0], alone["latents"][0, 0])  # without sharing: one x_T per row
