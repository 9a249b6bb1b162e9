#!/usr/bin/env bash
# GPU checks and benchmarks in phases, for an H200 machine (run from the repository root; on the lent
# machine, build the package bundle first with `bash benchmarks/prepare_device.sh`):
#   bash benchmarks/gpu_suite.sh PHASE [PHASE ...]
# Phases: env, tests, vllm, vllm-trainer, sampling, core, rollout, export, engine, engine-compile, dist (needs 2 GPUs), lora-kl,
#         trainer, trainer-run (= trainer-run-a trainer-run-b), trainer-run-algos, trainer-run-algos-sde,
#         trainer-run-scaling (needs 2 GPUs), lora-sync, trainer-run-defaults, profile-b, growth-a, growth-b,
#         models-sampling, models-trainer, reward-stream.
#   tests:   every `gpu`-marked test (one GPU; the two-GPU ones skip below 2 devices), among them the
#            LoRA + KL bf16 loop (ref log-prob -> update -> ref log-prob -> update) on one GPU, SD3 and Qwen-Image
#   dist:    the two-GPU tests of test_fsdp_engine_distributed.py, among them the same loop on two GPUs (NCCL)
#   lora-kl: only the LoRA + KL bf16 loops, one and two GPUs
#   rollout: bench_diffusion_server.py (trajectory transfer vs generate, mid Qwen-Image, bf16, 512², n=16)
#   export:  bench_weight_export.py (LoRA r64 of workload B's width, 56.6 M params, and the full model)
#   trainer: bench_trainer_workload.py (workload A: flow_grpo-style SD3 loop vs the project's pieces, LoRA + KL)
#   trainer-run-a / -b: bench_trainer_run.py (the real verl-omni-train on Ray + HTTP rollout), 2 warm-up + 3 steps:
#            workload A compiled, colocated and awake, with the flow_grpo-style baseline in the same command; workload
#            B compiled, colocated and awake. Each fits one 10-minute call of the lent machine.
#   trainer-run-algos / trainer-run-algos-sde: bench_trainer_run.py on workload A per algorithm (docs/omni/algorithms.md),
#            1 warm-up + 3 steps, no baseline: FlowGRPO `default` and `nocfg` (its rollout without CFG, as nft / dpo) beside
#            nft, dpo, dppo; then `default` beside mix, dance, guard. RUN_ALGOS_VARIANTS / RUN_ALGOS_SDE_VARIANTS replace the
#            lists (e.g. RUN_ALGOS_VARIANTS=nocfg+nokl,nft+nokl: no reference forward in either). Each fits one 10-minute call.
#   trainer-run-defaults: workload A with NO overrides (`default`: the auto compile_blocks / reshard_after_forward)
#            beside `eager` (the actor's defaults before issue 29: compile_blocks=false, reshard_after_forward=true), the
#            flow_grpo-style baseline last, 2 warm-up + 3 steps; prints each stage's MFU. RUN_DEFAULTS_VARIANTS replaces
#            the list. One 10-minute call (about 400 s, as trainer-run-a).
#   profile-b: profile_step.py on workload B (the pieces in one process, compiled): each stage's device time by kernel
#            class (GEMM / attention / norm / elementwise / comm / other) and its MFU; JSON under $OUT/profile.
#   growth-a / growth-b: bench_growth.py, per-stage images/s and peak memory against resolution, images/step and
#            group size for workload A's 1.0 B SD3 / B's 2.8 B Qwen-Image width (eager pieces), the growth per doubling
#            and the largest images/step that fits; JSON + PNGs under $OUT/growth (then, on any machine,
#            `python benchmarks/bench_growth.py --chart $OUT/growth/growth_cuda_a.json $OUT/growth/growth_cuda_b.json
#            --out docs/assets/benchmarks` draws both models together). One 10-minute call each.
#   trainer-run-scaling (needs 2 GPUs): workload A compiled on one GPU and on two (twice the prompts per step),
#            colocated; the two-GPU run's `vs_1gpu` is the weak-scaling ratio (target >= 1.8).
#            RUN_A_VARIANTS / RUN_B_VARIANTS replace the variant lists (e.g. `compile,compile+eager-rollout`).
#            (`--variants compile+perprompt+http` gives the defaults before the grouped requests and the shm segment.)
#   vllm:    the vLLM and vLLM-Omni GPU tests (verl-core's ServerContractSuite on vLLMHttpServer with a tiny Qwen2,
#            on vLLMOmniHttpServer with tiny Qwen-Image, SD3, FLUX and Wan; the
#            in-memory LoRA through the hijack on Qwen-Image, FLUX and Wan); needs the
#            vLLM bundle: `source benchmarks/device_env.sh` first (its header says how the bundles travel)
#   vllm-trainer: verl-omni-train on rollout.name=vllm_omni for 3 steps (colocated, LoRA sync), tiny Qwen-Image
#   reward-model: the vLLM chat route on a tiny Qwen2.5-VL (images, same answers as vLLM's own app, sleep/wake), the OCR
#            recipe's reward model on vLLM in the trainer (colocated; own pool with 2 GPUs; each with reward.stream off
#            and on, printing the reward stage's whole and exposed seconds), bench_chat.py on vLLM (needs the vLLM bundle)
#   reward-stream (issue 27): bench_trainer_run.py on workload A scored by the OCR reward on a random Qwen2.5-VL of
#            about 1.3 B parameters (`--reward-model mid`, trainer_run_reward.py) on verl-core's HF server, colocated
#            and sleeping between reward phases: `perprompt` (one request per prompt) against `perprompt+stream`
#            (the same requests, each group scored while the others generate); 1 warm-up + 3 steps. Add `+rm-vllm`
#            for the vLLM server (needs the vLLM bundle) and `+rm-pool` for a GPU of its own (needs 2 GPUs:
#            RUN_RM_DEVICES=0,1). RUN_RM_MODEL / RUN_RM_VARIANTS replace the model and the list.
#   trainer-run-vllm: workload A with the diffusers rollout and with vllm_omni in one command (needs the vLLM bundle)
#   models-sampling (issue 33): bench_logprob_pipeline.py on the `flux` and `wan` presets of trainer_workload_parts.py
#            (log-prob sampling vs the stock __call__, target >= 0.95). Estimate: FLUX 3.3e12 FLOPs per image forward
#            (verl_omni.models.flops: 2.5 B, 1024 + 128 tokens) x 8 images x 10 steps = 2.7e14 per call, 12 calls
#            (2 warm-up + 2 x 5) = 3.2e15, 8 s at 400 TFLOP/s; Wan 7.2e13 per video forward (verl_omni.models.flops:
#            1.4 B, 14 040 video + 128 text tokens) x 4 videos x 10 steps x 2 (CFG) =
#            5.7e15 per call, 12 calls = 6.9e16, 172 s; plus building the folders (~1 min): about 5 min in one call.
#   models-trainer (issue 33): bench_trainer_run.py `--preset flux` (2 warm-up + 3 steps) then `--preset wan` (1 + 2),
#            `default` variant, no baseline. Estimate: FLUX 16 images x (10 gen + 9 ref + 27 update) forwards x 3.3e12
#            = 2.5e15 per step, 6 s at 400 TFLOP/s, 5 steps 31 s; Wan 8 videos x 2 (CFG) x (10 gen + 2 ref + 6 update)
#            x 7.2e13 = 2.1e16 per step, 52 s, 3 steps 155 s; with folder builds, Ray start and compilation (~2 min
#            each) about 8 min: one 10-minute call (timeouts 230 s + 340 s).
#   lora-sync: bench_lora_sync.py on workloads A and B (push over shm / HTTP, from a second process shm vs CUDA IPC, the engine's update vs per-tensor
#            copies, merge vs peft, sleep / wake after a LoRA update vs full copies)
# Logs and benchmark outputs go to $OUT (or benchmarks/results when $OUT is unset).
set -uo pipefail
out=${OUT:-benchmarks/results}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 OUT="$out"
status=0
run() { # name, command...
  local name=$1; shift
  echo "=== $name: $*"
  local t0=$SECONDS
  "$@" 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: rc=$rc in $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] || status=1
}
for phase in "$@"; do
  case $phase in
    env) run env python3 -c "import torch, diffusers, tensordict, transformers, peft; print(torch.__version__, torch.cuda.device_count(), torch.cuda.get_device_name(0), diffusers.__version__, tensordict.__version__, transformers.__version__, peft.__version__)" ;;
    tests) run gpu-tests python3 -m pytest -p no:cacheprovider -m gpu -q -rs \
             packages/verl-core/tests packages/verl-omni/tests ;;
    sampling) CUDA_VISIBLE_DEVICES=0 run bench-sampling-qwen python3 benchmarks/bench_logprob_pipeline.py \
                --device cuda --preset mid --chart "$out/bench_logprob_pipeline.png" ;;
    models-sampling) for preset in flux wan; do
                       CUDA_VISIBLE_DEVICES=0 run bench-sampling-$preset timeout 280 python3 benchmarks/bench_logprob_pipeline.py \
                         --device cuda --preset $preset --chart "$out/bench_logprob_pipeline_$preset.png"
                     done ;;
    models-trainer) CUDA_VISIBLE_DEVICES=0 run bench-trainer-run-flux timeout 230 python3 benchmarks/bench_trainer_run.py \
                      --device cuda --preset flux --variants "${RUN_FLUX_VARIANTS:-default}" --skip-baseline --warmup 2 --steps 3 \
                      --out "$out/models"
                    CUDA_VISIBLE_DEVICES=0 run bench-trainer-run-wan timeout 340 python3 benchmarks/bench_trainer_run.py \
                      --device cuda --preset wan --variants "${RUN_WAN_VARIANTS:-default}" --skip-baseline --warmup 1 --steps 2 \
                      --out "$out/models" ;;
    core) CUDA_VISIBLE_DEVICES=0 run bench-server python3 benchmarks/bench_rollout_server.py --device cuda
          CUDA_VISIBLE_DEVICES=0 run bench-weight-sync python3 benchmarks/bench_weight_sync.py --device cuda ;;
    rollout) CUDA_VISIBLE_DEVICES=0 run bench-diffusion-server python3 benchmarks/bench_diffusion_server.py \
               --device cuda --preset mid --out "$out" ;;
    export) CUDA_VISIBLE_DEVICES=0 run bench-weight-export python3 benchmarks/bench_weight_export.py \
              --device cuda --full --out "$out" ;;
    engine) CUDA_VISIBLE_DEVICES=0 run bench-engine python3 benchmarks/bench_fsdp_engine.py --device cuda --out-dir "$out" ;;
    engine-compile) CUDA_VISIBLE_DEVICES=0 run bench-engine-compile python3 benchmarks/bench_fsdp_engine.py \
                      --device cuda --compile --skip-offload --lora-rank 0 --out-dir "$out/compile" ;;
    trainer) CUDA_VISIBLE_DEVICES=0 run bench-trainer-workload python3 benchmarks/bench_trainer_workload.py \
               --device cuda --variants "${TRAINER_VARIANTS:-fused,fused+compile+keep,recompute+compile+keep,reuse+compile+keep}" \
               --out "$out" ;;
    trainer-run) bash "$0" trainer-run-a trainer-run-b || status=1 ;;
    # each of these fits one 10-minute call of the lent machine (about 400 s and 260 s)
    trainer-run-a) CUDA_VISIBLE_DEVICES=0 run bench-trainer-run-a timeout 560 python3 benchmarks/bench_trainer_run.py \
                     --device cuda --preset a --variants "${RUN_A_VARIANTS:-compile,compile+awake}" --warmup 2 --steps 3 --out "$out" ;;
    trainer-run-b) CUDA_VISIBLE_DEVICES=0 run bench-trainer-run-b timeout 560 python3 benchmarks/bench_trainer_run.py \
                     --device cuda --preset b --variants "${RUN_B_VARIANTS:-compile,compile+awake}" --skip-baseline --warmup 2 --steps 3 \
                     --out "$out" ;;
    trainer-run-algos) CUDA_VISIBLE_DEVICES=0 run bench-trainer-run-algos timeout 560 python3 benchmarks/bench_trainer_run.py \
                         --device cuda --preset a --variants "${RUN_ALGOS_VARIANTS:-default,nocfg,nft,dpo,dppo}" \
                         --skip-baseline --warmup 1 --steps 3 --out "$out/algos" ;;
    trainer-run-algos-sde) CUDA_VISIBLE_DEVICES=0 run bench-trainer-run-algos-sde timeout 560 python3 benchmarks/bench_trainer_run.py \
                             --device cuda --preset a --variants "${RUN_ALGOS_SDE_VARIANTS:-default,mix,dance,guard}" \
                             --skip-baseline --warmup 1 --steps 3 --out "$out/algos_sde" ;;
    trainer-run-scaling) run bench-trainer-run-scaling timeout 560 python3 benchmarks/bench_trainer_run.py \
                           --device cuda --preset a --variants "${RUN_SCALING_VARIANTS:-compile,compile+2gpu}" \
                           --skip-baseline --warmup 2 --steps 3 --out "$out/scaling" ;;
    trainer-run-defaults) CUDA_VISIBLE_DEVICES=0 run bench-trainer-run-defaults timeout 570 python3 benchmarks/bench_trainer_run.py \
                            --device cuda --preset a --variants "${RUN_DEFAULTS_VARIANTS:-default,eager}" --warmup 2 --steps 3 \
                            --out "$out/defaults" ;;
    profile-b) CUDA_VISIBLE_DEVICES=0 run profile-step-b timeout 570 python3 benchmarks/profile_step.py \
                 --device cuda --preset b --out "$out/profile" ;;
    growth-a|growth-b) CUDA_VISIBLE_DEVICES=0 run "bench-$phase" timeout 570 python3 benchmarks/bench_growth.py \
                         --device cuda --models "${phase#growth-}" --out "$out/growth" ;;
    lora-sync) for preset in a b; do
                 CUDA_VISIBLE_DEVICES=0 run bench-lora-sync-$preset python3 benchmarks/bench_lora_sync.py \
                   --device cuda --preset $preset --out "$out"
               done ;;
    vllm) run gpu-vllm timeout -k 10 "${VLLM_TESTS_TIMEOUT:-2400}" python3 -m pytest -p no:cacheprovider -m gpu -v -rs \
            packages/verl-core/tests/rollout/test_gpu_backends.py packages/verl-omni/tests/rollout/test_vllm_omni_gpu.py ;;
    vllm-trainer) VERL_TEST_RAY_LOGS=1 run gpu-vllm-trainer timeout -k 10 "${VLLM_TRAINER_TIMEOUT:-420}" python3 -m pytest -p no:cacheprovider -m gpu -q -rs -s -k vllm_omni \
                    packages/verl-omni/tests/trainer/test_trainer_gpu.py ;;
    reward-stream) CUDA_VISIBLE_DEVICES=${RUN_RM_DEVICES:-0} run bench-trainer-run-reward timeout 570 python3 benchmarks/bench_trainer_run.py \
                     --device cuda --preset a --reward-model "${RUN_RM_MODEL:-mid}" \
                     --variants "${RUN_RM_VARIANTS:-perprompt,perprompt+stream}" --skip-baseline --warmup 1 --steps 3 \
                     --out "$out/reward" ;;
    trainer-run-vllm) CUDA_VISIBLE_DEVICES=0 run bench-trainer-run-vllm timeout 560 python3 benchmarks/bench_trainer_run.py \
                        --device cuda --preset a --variants "${RUN_VLLM_VARIANTS:-compile+vllm-omni,compile}" \
                        --skip-baseline --warmup 1 --steps 3 --out "$out/vllm" ;;
    reward-model) run gpu-vllm-chat timeout -k 10 180 python3 -m pytest -p no:cacheprovider -m gpu -q -rs -s \
                    packages/verl-core/tests/rollout/test_gpu_backends.py -k vllm_chat
                  VERL_TEST_RAY_LOGS=1 run gpu-reward-model timeout -k 10 "${REWARD_MODEL_TIMEOUT:-480}" python3 -m pytest -p no:cacheprovider -m gpu -q -rs -s \
                    packages/verl-omni/tests/trainer/test_trainer_gpu.py -k reward_model
                  CUDA_VISIBLE_DEVICES=0 run bench-chat-vllm timeout 200 python3 benchmarks/bench_chat.py --backend vllm --device cuda \
                    --requests 256 --concurrency 64 --rounds 3 --out "$out" ;;
    dist) run gpu-dist python3 -m pytest -p no:cacheprovider -m gpu -q -rs \
            packages/verl-omni/tests/engine/test_fsdp_engine_distributed.py ;;
    lora-kl) run gpu-lora-kl python3 -m pytest -p no:cacheprovider -m gpu -q -rs -s -k lora_kl \
               packages/verl-omni/tests/engine ;;
    *) echo "unknown phase $phase"; status=2 ;;
  esac
done
exit $status
