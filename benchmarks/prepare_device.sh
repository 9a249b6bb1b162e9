#!/usr/bin/env bash
# Build the .device/ bundle for the lent GPU machine with everything this project's GPU runs import there.
#   bash benchmarks/prepare_device.sh      (from the repository root, on a machine that reaches the index)
# The GPU image has torch, transformers, peft, accelerate but not the server stack: pydantic, fastapi (0.165
# imports opentelemetry-api), uvicorn, httpx and their small dependencies travel in the bundle, pinned to the
# releases this project's CPU venv runs (pydantic and pydantic-core must match: a lone newer pydantic-core
# breaks the import). Then: run(carry=[".device"], command="source .device/setup.sh && bash benchmarks/gpu_suite.sh ...").
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
bash ../shared/device/prepare.sh \
  tensordict==0.15.3 pyvers==0.2.3 cloudpickle \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types typing-inspection \
  fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 opentelemetry-api==1.45.2 \
  h11 httpx httpcore anyio sniffio \
  rapidfuzz tenacity openai==3.60.0 distro jiter httpx2==2.16.2 httpcore2==2.16.2 truststore idna certifi
echo "check first on the GPU machine (seconds, before a long run):"
echo "  python3 -c 'import verl_core.rollout.app, verl_omni.trainer.main, verl_omni.rollout.diffusers.server, ray, tensordict, diffusers, hydra, uvicorn'"
