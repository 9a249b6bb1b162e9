"""What a rollout process loads at import: the server, replica and client modules leave `openai` to the chat route."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a fresh interpreter imports torch

CODE = """
import sys
import verl_core.rollout, verl_core.rollout.server, verl_core.rollout.app, verl_core.rollout.client
import verl_core.rollout.replica, verl_core.rollout.chat
print("openai" in sys.modules)
from verl_core.rollout.chat import chat_completion
answer = chat_completion("chatcmpl-1", "verl", ["hi"], ["stop"], prompt_tokens=3, completion_tokens=1)
print(type(answer).__module__, answer.choices[0].message.content, answer.usage.total_tokens)
"""


def test_server_modules_load_openai_only_when_a_chat_answer_is_built():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split("\n")[:2] == ["False", "openai.types.chat.chat_completion hi 4"], out.stdout
