"""Model registry and the Qwen-Image / SD3 adapters: schedules (E4, T12 of docs/omni/math.md), latents, guidance."""

import sys
import textwrap

import numpy as np
import pytest
import torch

from verl_omni.models import (
    DiffusionModelBase,
    QwenImageAdapter,
    SD3Adapter,
    adapter_for_folder,
    get_class,
    register,
    registered_names,
)
from verl_omni.schedulers import FlowMatchSDEDiscreteScheduler, sde_transition

# ---- registry ---------------------------------------------------------------------------------------


def test_get_class_by_name_and_pipeline_class():
    assert get_class("qwen_image") is QwenImageAdapter
    assert get_class("QwenImagePipeline") is QwenImageAdapter
    assert get_class("sd3") is SD3Adapter
    assert get_class("StableDiffusion3Pipeline") is SD3Adapter
    assert {"qwen_image", "sd3"} <= set(registered_names())


def test_unknown_name_lists_registered():
    with pytest.raises(
        KeyError, match=r"model name: unknown diffusion model 'no_such_model'.*registered: .*flux.*qwen_image.*sd3"
    ):
        get_class("no_such_model")


def test_external_lib_imported_once(tmp_path, monkeypatch):
    (tmp_path / "my_adapters_ext.py").write_text(
        textwrap.dedent(
            """
            from verl_omni.models import SD3Adapter, register
            IMPORTS = globals().get("IMPORTS", 0) + 1

            @register("my_sd3_variant")
            class MyAdapter(SD3Adapter):
                pipeline_class_names = ()
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = get_class("my_sd3_variant", external_lib="my_adapters_ext")
    assert cls.name == "my_sd3_variant" and issubclass(cls, DiffusionModelBase)
    module = sys.modules["my_adapters_ext"]
    get_class("my_sd3_variant", external_lib="my_adapters_ext")
    with pytest.raises(KeyError, match="after importing 'my_adapters_ext'"):
        get_class("still_missing", external_lib="my_adapters_ext")
    assert sys.modules["my_adapters_ext"] is module and module.IMPORTS == 1


def test_register_refuses_a_taken_name():
    with pytest.raises(ValueError, match="already registered"):

        @register("sd3")
        class Other(SD3Adapter):
            pipeline_class_names = ()


def test_adapter_for_folder(tiny_qwen_image_path, tiny_sd3_path):
    assert isinstance(adapter_for_folder(tiny_qwen_image_path), QwenImageAdapter)
    sd3 = adapter_for_folder(tiny_sd3_path)
    assert isinstance(sd3, SD3Adapter) and sd3.latent_shape(64, 64) == (16, 8, 8)


# ---- schedules --------------------------------------------------------------------------------------


def test_qwen_image_schedule_e4(tiny_qwen_image_path):
    adapter = adapter_for_folder(tiny_qwen_image_path)
    sched = adapter.build_scheduler()
    assert isinstance(sched, FlowMatchSDEDiscreteScheduler)
    adapter.set_timesteps(sched, 10, 512, 512)
    expected = [1.0, 0.928970, 0.851485, 0.766624, 0.673281, 0.570117, 0.455497, 0.327400, 0.183300, 0.020000, 0]
    np.testing.assert_allclose(sched.sigmas.numpy(), expected, atol=6e-7)
    sig = sched.sigmas.double()
    want = [
        (4.502557, 1.200000),
        (4.339702, 1.208004),
        (2.873321, 0.837024),
        (2.174924, 0.664485),
        (1.722630, 0.553293),
    ]
    x = torch.zeros(1, 1, dtype=torch.float64)
    for i, (sd_want, s_want) in enumerate(want):
        _, s, sd = sde_transition(x, x, sig[i], sig[i + 1], sig[1], 1.2, "sde")
        assert (sd.item(), s.item()) == pytest.approx((sd_want, s_want), abs=3e-6)


def test_sd3_schedule_matches_stock_pipeline(tiny_sd3_pipe):
    adapter, sched = tiny_sd3_pipe.adapter, tiny_sd3_pipe.sde_scheduler
    adapter.set_timesteps(sched, 10, 64, 64)
    assert sched.sigmas[1].item() == pytest.approx(0.960129, abs=6e-7)


# ---- latents ------------------------------------------------------------------------------------------


def test_qwen_latents_match_stock_prepare_latents(tiny_qwen_image_pipe):
    pipe = tiny_qwen_image_pipe
    gens = [torch.Generator().manual_seed(s) for s in (1, 2)]
    ours = pipe.adapter.prepare_latents(2, 64, 64, gens, "cpu")
    gens = [torch.Generator().manual_seed(s) for s in (1, 2)]
    stock = pipe.prepare_latents(2, 16, 64, 64, torch.float32, "cpu", gens)
    assert torch.equal(ours, stock) and ours.shape == (2, 16, 64)


def test_sd3_latents_match_stock_prepare_latents(tiny_sd3_pipe):
    pipe = tiny_sd3_pipe
    ours = pipe.adapter.prepare_latents(2, 64, 64, torch.Generator().manual_seed(4), "cpu")
    stock = pipe.prepare_latents(2, 16, 64, 64, torch.float32, "cpu", torch.Generator().manual_seed(4))
    assert torch.equal(ours, stock)


@pytest.mark.parametrize("model", ["qwen_image", "sd3"])
def test_wrong_sizes_and_shapes_name_the_parameter(model, request):
    adapter = request.getfixturevalue(f"tiny_{model}_pipe").adapter
    with pytest.raises(ValueError, match="height/width"):
        adapter.latent_shape(60, 64)
    with pytest.raises(ValueError, match="latents"):
        adapter.check_latents(torch.zeros(2, 5, 5), 64, 64)
    with pytest.raises(ValueError, match="generator"):
        adapter.prepare_latents(3, 64, 64, [torch.Generator()], "cpu")


# ---- guidance rules (§2.4) ------------------------------------------------------------------------------


def _raw_qwen(pipe, x, t, embeds, mask):
    gh = gw = 64 // 16
    with torch.no_grad():
        return pipe.transformer(
            hidden_states=x, timestep=t / 1000, encoder_hidden_states=embeds, encoder_hidden_states_mask=mask,
            img_shapes=[[(1, gh, gw)]] * x.shape[0], return_dict=False,
        )[0]  # fmt: skip


def test_qwen_true_cfg_is_norm_rescaled(tiny_qwen_image_pipe):
    pipe = tiny_qwen_image_pipe
    adapter = pipe.adapter
    cond = adapter.encode_prompts(pipe, ["a cat", "two dogs playing in the snow"], negative_prompt=" ", do_cfg=True,
                                  max_sequence_length=160, device="cpu")  # fmt: skip
    assert cond["prompt_embeds"].shape == (2, 160, 64) and cond["prompt_embeds_mask"].dtype == torch.int64
    lengths = cond["prompt_embeds_mask"].sum(1)
    assert lengths.lt(160).all() and lengths[0] < lengths[1]  # padded to the fixed length, masks per prompt
    assert cond["prompt_embeds"][0, lengths[0] :].abs().sum() == 0
    x = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(0))
    t = torch.full((2,), 700.0)
    v_c = _raw_qwen(pipe, x, t, cond["prompt_embeds"], cond["prompt_embeds_mask"])
    v_n = _raw_qwen(pipe, x, t, cond["negative_prompt_embeds"], cond["negative_prompt_embeds_mask"])
    comb = v_n + 4.0 * (v_c - v_n)
    expected = comb * v_c.norm(dim=-1, keepdim=True) / comb.norm(dim=-1, keepdim=True)
    with torch.no_grad():
        got = adapter.velocity(pipe.transformer, x, t, cond, guidance_scale=4.0, height=64, width=64)
        plain = adapter.velocity(pipe.transformer, x, t, cond, guidance_scale=1.0, height=64, width=64)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)  # trimmed padding: rounding only
    torch.testing.assert_close(got.norm(dim=-1), v_c.norm(dim=-1), atol=1e-5, rtol=1e-5)  # per-token norm kept
    torch.testing.assert_close(plain, v_c, atol=1e-5, rtol=1e-5)


def test_sd3_plain_cfg(tiny_sd3_pipe):
    pipe = tiny_sd3_pipe
    adapter = pipe.adapter
    cond = adapter.encode_prompts(
        pipe, ["a cat"], negative_prompt="", do_cfg=True, max_sequence_length=32, device="cpu"
    )
    x = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(0))
    t = torch.full((1,), 700.0)

    def raw(e, p):
        with torch.no_grad():
            return pipe.transformer(hidden_states=x, timestep=t, encoder_hidden_states=e, pooled_projections=p,
                                    return_dict=False)[0]  # fmt: skip

    v_c = raw(cond["prompt_embeds"], cond["pooled_prompt_embeds"])
    v_u = raw(cond["negative_prompt_embeds"], cond["negative_pooled_prompt_embeds"])
    with torch.no_grad():
        got = adapter.velocity(pipe.transformer, x, t, cond, guidance_scale=4.5, height=64, width=64)
    torch.testing.assert_close(got, v_u + 4.5 * (v_c - v_u), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="negative_prompt_embeds"):
        adapter.velocity(pipe.transformer, x, t, cond.exclude("negative_prompt_embeds"), guidance_scale=4.5,
                         height=64, width=64)  # fmt: skip


@pytest.mark.parametrize("model", ["qwen_image", "sd3"])
def test_cfg_conditioning_holds_the_negative_prompts_own_encoding(model, request):
    """`encode_prompts(do_cfg=True)` stores, under `negative_<key>`, what encoding the negative prompt alone gives.

    Mutation run by hand: `DiffusionModelBase.prompt_batch` storing the positive embeddings as the negative ones
    (`out[key]` for `value`): FAILED here for both models, while the CFG and stock-parity tests still passed.
    """
    pipe = request.getfixturevalue(f"tiny_{model}_pipe")
    adapter, kw = pipe.adapter, {"max_sequence_length": 32, "device": "cpu"}
    cond = adapter.encode_prompts(pipe, ["a cat", "two dogs"], negative_prompt="blurry", do_cfg=True, **kw)
    alone = adapter.encode_prompts(pipe, ["blurry", "blurry"], negative_prompt=None, do_cfg=False, **kw)
    assert list(cond.keys()) == [*adapter.cond_keys, *adapter.negative_cond_keys]
    for key, negative_key in zip(adapter.cond_keys, adapter.negative_cond_keys, strict=True):
        torch.testing.assert_close(cond[negative_key], alone[key])


@pytest.mark.parametrize("model", ["qwen_image", "sd3"])
def test_decode_returns_uint8(model, request):
    pipe = request.getfixturevalue(f"tiny_{model}_pipe")
    latents = torch.randn(2, *pipe.adapter.latent_shape(64, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        images = pipe.adapter.decode(pipe, latents, 64, 64)
    assert images.dtype == torch.uint8 and images.shape == (2, 3, 64, 64)


def test_qwen_trims_trailing_padding_only():
    from verl_omni.models.qwen_image import _trim_padding

    embeds = torch.arange(2 * 6 * 1, dtype=torch.float32).reshape(2, 6, 1)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]])
    e, m = _trim_padding(embeds, mask)
    assert e.shape == (2, 3, 1) and m.tolist() == [[1, 1, 1], [1, 1, 0]]
    e, m = _trim_padding(embeds[:1], mask[:1])
    assert e.shape == (1, 3, 1) and m is None  # every kept token valid: no mask, like the stock pipeline
