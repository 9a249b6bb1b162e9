"""GPU checks: HFHttpServer frees and restores accelerator memory; the contract suite on vLLM when installed."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from verl_core.config import RolloutConfig
from verl_core.rollout.hf import HFHttpServer
from verl_core.testing.server_contract import ContractBackend, ServerContractSuite, run
from verl_core.testing.tiny_llm import build_tiny_llm, random_state_dict

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
GREEDY = {"prompt": "the man said that", "sampling_params": {"max_tokens": 8, "temperature": 0.0}}


def test_hf_gpu_sleep_moves_weights_off_the_accelerator(tmp_path):
    folder = build_tiny_llm(tmp_path / "m", hidden_size=256, num_layers=4)
    server = HFHttpServer(RolloutConfig(model={"path": str(folder)}, device="cuda"))
    run(server.launch())
    try:
        before = run(server.generate(GREEDY))
        on_gpu = server.metrics_snapshot()["param_bytes_on_accelerator"]
        allocated = torch.cuda.memory_allocated()
        run(server.sleep(level=1))
        assert server.metrics_snapshot()["param_bytes_on_accelerator"] == 0
        assert torch.cuda.memory_allocated() <= allocated - on_gpu + (1 << 20)
        run(server.update_weights(random_state_dict(folder, seed=3), version=2, bucket_bytes=1 << 20))  # while asleep
        run(server.wake_up())
        assert server.metrics_snapshot()["param_bytes_on_accelerator"] == on_gpu
        after = run(server.generate(GREEDY))
        assert after.weight_version == 2 and after.token_ids != before.token_ids
    finally:
        run(server.shutdown())


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm (pip install 'verl-core[vllm]')")
class TestVLLMServerContract(ServerContractSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tmp_path_factory) -> ContractBackend:
        from verl_core.rollout.vllm import vLLMHttpServer

        folder = build_tiny_llm(tmp_path_factory.mktemp("vllm-tiny"), hidden_size=256, num_layers=2)
        config = RolloutConfig(
            model={"path": str(folder)}, name="vllm", gpu_memory_utilization=0.2, enforce_eager=True, max_model_len=512
        )
        return ContractBackend(
            server_cls=vLLMHttpServer,
            config=config,
            request={"prompt_ids": [4, 5, 6, 7], "seed": 7, "sampling_params": {"max_tokens": 8}},
            long_request={"prompt_ids": [4, 5], "sampling_params": {"max_tokens": 500, "ignore_eos": True}},
            new_weights=lambda seed: random_state_dict(folder, seed=seed),
        )


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm (pip install 'verl-core[vllm]')")
def test_vllm_chat_answers_image_questions_like_vllms_own_app_and_after_sleep(tmp_path):
    """`/v1/chat/completions` on vLLM with a tiny random Qwen2.5-VL: images reach the model, the checked route answers
    what vLLM's own OpenAI app answers for the same seeded request, and a sleep / wake keeps the greedy answer."""
    import base64
    import io

    import httpx
    import openai
    from PIL import Image

    from verl_core.rollout.vllm import vLLMHttpServer
    from verl_core.testing.tiny_llm import build_tiny_vlm

    def ask(color):
        buffer = io.BytesIO()
        Image.new("RGB", (64, 48), color).save(buffer, format="PNG")
        url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
        text = {"type": "text", "text": "what is in the image"}
        return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, text]}]

    folder = build_tiny_vlm(tmp_path / "vlm", hidden_size=256, num_heads=4, vision_heads=4)
    config = RolloutConfig(
        model={"path": str(folder)}, name="vllm", gpu_memory_utilization=0.2, enforce_eager=True, max_model_len=512,
        request_timeout_s=120, max_request_bytes=64 << 20,
    )  # fmt: skip
    server = vLLMHttpServer(config)
    run(server.launch())
    http = httpx.Client(trust_env=False, timeout=120)
    try:
        ours = openai.OpenAI(base_url=server.address + "/v1", api_key="-", max_retries=0, http_client=http)
        theirs = openai.OpenAI(base_url=server.address + "/openai/v1", api_key="-", max_retries=0, http_client=http)
        red, blue = ask((220, 10, 10)), ask((10, 10, 220))
        greedy = {"max_tokens": 8, "temperature": 0.0}
        answer = ours.chat.completions.create(model="judge", messages=red, **greedy)
        assert answer.object == "chat.completion" and answer.model == "judge"
        text_only = ours.chat.completions.create(
            model="judge", messages=[{"role": "user", "content": "what is in the image"}], **greedy
        )
        assert answer.usage.prompt_tokens >= text_only.usage.prompt_tokens + 3  # the image's tokens count
        assert ours.chat.completions.create(model="j", messages=blue, **greedy).choices[0].message.content != (
            answer.choices[0].message.content
        )
        sampled = {"max_tokens": 8, "temperature": 1.0, "seed": 11, "n": 2}
        mine = ours.chat.completions.create(model="j", messages=red, **sampled)
        direct = theirs.chat.completions.create(model="verl", messages=red, **sampled)
        assert [c.message.content for c in mine.choices] == [c.message.content for c in direct.choices]
        run(server.sleep(level=1))
        run(server.wake_up())
        again = ours.chat.completions.create(model="judge", messages=red, **greedy)
        assert again.choices[0].message.content == answer.choices[0].message.content
        print("vllm chat:", answer.choices[0].message.content, "| usage", answer.usage)
    finally:
        http.close()
        run(server.shutdown())
