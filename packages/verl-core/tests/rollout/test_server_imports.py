"""What a fresh rollout process loads at import: neither `vllm` (an optional extra) nor `openai` (the chat route's).

One interpreter checks both (a fresh interpreter imports torch: a few seconds of CI per subprocess).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a fresh interpreter imports torch

CODE = """
import sys
import verl_core.rollout, verl_core.rollout.server, verl_core.rollout.app, verl_core.rollout.client
import verl_core.rollout.replica, verl_core.rollout.registry, verl_core.rollout.chat
import verl_core.rollout.vllm, verl_core.rollout.vllm.worker_extension
print("vllm" in sys.modules, "openai" in sys.modules)
from verl_core.rollout.chat import chat_completion
answer = chat_completion("chatcmpl-1", "verl", ["hi"], ["stop"], prompt_tokens=3, completion_tokens=1)
print(type(answer).__module__, answer.choices[0].message.content, answer.usage.total_tokens)
"""


def test_rollout_modules_load_no_vllm_and_openai_only_when_a_chat_answer_is_built():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split("\n")[:2] == ["False False", "openai.types.chat.chat_completion hi 4"], out.stdout
