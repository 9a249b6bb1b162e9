# Sourced on the lent GPU machine from the repository root: the project's bundle and vLLM's on PYTHONPATH.
#   source benchmarks/device_env.sh
# The bundles reach the machine in runs of their own, back to back (a run carries at most 64 MiB, and the machine
# keeps /tmp only while it stays warm, about 30 s after a run):
#   run 1..3 (carry .vl0, .vl1, .vl2):  mkdir -p /tmp/vb && cp .vlK/* /tmp/vb/
#   run 4 (carry .device):               source .device/setup.sh      (unpacks the project's bundle into /tmp/site)
#   run 5 (no carry):                    source benchmarks/device_env.sh && bash benchmarks/gpu_suite.sh vllm
# Build the bundles first, here: `bash benchmarks/prepare_device.sh` and `bash ../shared/device/prepare_vllm.sh`.
# vLLM's set comes first on PYTHONPATH: vllm 0.26 needs its own pins (fastapi < 0.137, vllm-omni's diffusers 0.38).
if [ -d .device ] && [ ! -e /tmp/site/.done ]; then
  # shellcheck disable=SC1091
  source .device/setup.sh || return 1
fi
if [ ! -e /tmp/vsite/.done ]; then
  if ! ls /tmp/vb/part.* >/dev/null 2>&1 || [ ! -e /tmp/vb/unpack.sh ]; then
    echo "device_env: vLLM's bundle is not in /tmp/vb (send .vl0 .. .vl2 first, see this file's header)" >&2
    return 1
  fi
  bash /tmp/vb/unpack.sh && touch /tmp/vsite/.done || return 1
fi
if [ ! -e /tmp/site/.done ]; then
  echo "device_env: the project's bundle is not in /tmp/site (send .device first, see this file's header)" >&2
  return 1
fi
src=$(ls -d packages/*/src shims/*/src tools/*/src 2>/dev/null | sed "s|^|$PWD/|" | tr '\n' ':')
export PYTHONPATH="${src}/tmp/vsite:/tmp/site"
export PATH="/tmp/site/bin:$PATH"
export VLLM_USE_FLASHINFER_SAMPLER=0   # the bundle leaves flashinfer out
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -c "import vllm, vllm_omni, ray, diffusers, tensordict, hydra; print('device_env: vllm', vllm.__version__, \
'vllm_omni', vllm_omni.__version__, 'diffusers', diffusers.__version__)" || return 1
