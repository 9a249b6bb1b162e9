"""Issue 13 end to end: the pre-#6200 look-alikes, migrated, train one step in this project's trainer.

Each file is migrated with the command line tool, then run as a user would: a root config or dump with
`python -m verl_omni.trainer.main_diffusion --config-path ... --config-name ...`, a launch script with `bash`. They
get only the model path (`tiny://qwen_image`), the rollout backend (`diffusers`) and `SMALL` (one step, tiny sizes,
the CPU); the scripts get these as extra arguments (`$@`), and the files they read (prompt files, verl's dummy-data
script) are written beside them, as a user must provide them; the OCR script's reward model gets its path, backend and
sizes the same way. Needs verl-omni and Ray;
each run takes about a minute on a 2-core CPU.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from verl_migrate.cli import main

TARGET = "project"
HERE = pathlib.Path(__file__).parent
CONFIG = HERE / "pre6200" / "config"
EXAMPLES = HERE.parents[2] / "examples"
pytestmark = pytest.mark.slow

MODEL = "actor_rollout_ref.model.path=tiny://qwen_image"
BACKEND = "actor_rollout_ref.rollout.name=diffusers"
#: one step of a tiny run on the CPU (sizes, device, one actor rank, no validation or checkpoint) - not migration
SMALL = [
    "trainer.total_training_steps=1",
    "trainer.device=cpu",
    "trainer.n_gpus_per_node=1",
    "trainer.logger=[console]",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
    "trainer.save_freq=-1",
    "trainer.resume_mode=disable",
    "trainer.cpu_threads_per_worker=1",
    "data.train_batch_size=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.rollout.pipeline.height=32",
    "actor_rollout_ref.rollout.pipeline.width=32",
    "actor_rollout_ref.rollout.pipeline.num_inference_steps=3",
    "actor_rollout_ref.rollout.pipeline.max_sequence_length=16",
    "actor_rollout_ref.rollout.algo.sde_window_size=1",
    "actor_rollout_ref.rollout.algo.sde_window_range=[0,2]",
    "reward.num_workers=1",
    "actor_rollout_ref.actor.fsdp_config.param_offload=false",  # CPU offload needs a CUDA device
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
]

_DUMMY_DATA = """
import argparse, os
import pyarrow as pa, pyarrow.parquet as pq

p = argparse.ArgumentParser()
p.add_argument("--local_save_dir")
p.add_argument("--train_size", type=int)
p.add_argument("--val_size", type=int)
a = p.parse_args()
os.makedirs(a.local_save_dir, exist_ok=True)
for name, n in (("train", a.train_size), ("test", a.val_size)):
    rows = {"prompt": [f"a red square {i}" for i in range(n)], "data_source": ["jpeg_compressibility"] * n}
    pq.write_table(pa.table(rows), os.path.join(a.local_save_dir, name + ".parquet"))
"""


def _example_module(path: pathlib.Path):
    """Import a script of the repository's `examples/` folder."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _trainer_or_skip() -> None:
    from verl_migrate.validate import trainer_loader

    if not trainer_loader():
        pytest.skip("verl-omni with its trainer config is not installed")
    pytest.importorskip("ray")


def _migrate(args: list[str], capsys) -> str:
    """Run the tool; return its text report (stderr)."""
    assert main(["--report", "text", *args]) == 0
    return capsys.readouterr().err


def _env(home: pathlib.Path | None = None) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.setdefault("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))  # the tiny model is built once, cached there
    if home is not None:
        env["HOME"] = str(home)
    return env


def _run(cmd: list[str], cwd: pathlib.Path, env: dict[str, str]) -> None:
    """Run a training command; it must finish one step and write its metrics line."""
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=540)
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, tail
    (metrics,) = list(cwd.rglob("metrics.jsonl"))
    lines = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0]["step"] == 1, lines


def _prompts(path: pathlib.Path, data_source: str) -> None:
    """Write a parquet prompt file (the user's data, which the migrated files point at)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"prompt": ["a sign that says OPEN"] * 4, "data_source": [data_source] * 4}), path)


def _module(config_dir: pathlib.Path) -> list[str]:
    return [sys.executable, "-m", "verl_omni.trainer.main_diffusion", "--config-path", str(config_dir)]


def test_migrated_root_and_group_files_train_one_step(tmp_path, capsys) -> None:
    """Root config (saved under another name, as the tool says) plus the two group files, listed after it."""
    _trainer_or_skip()
    cfg = tmp_path / "config"
    for rel in ("model/diffusion_model.yaml", "rollout/diffusion_rollout.yaml"):
        (cfg / rel).parent.mkdir(parents=True)
        shutil.copy(CONFIG / rel, cfg / rel)
        _migrate(["-i", "--no-backup", str(cfg / rel)], capsys)
    report = _migrate([str(CONFIG / "diffusion_trainer.yaml"), "-o", str(cfg / "my_diffusion_trainer.yaml")], capsys)
    assert "-o my_diffusion_trainer.yaml" in report  # the name clash is a report line
    groups = ["+model@actor_rollout_ref.model=diffusion_model", "+rollout@actor_rollout_ref.rollout=diffusion_rollout"]
    cmd = [*_module(cfg), "--config-name", "my_diffusion_trainer", *groups, MODEL, BACKEND, *SMALL]
    _run(cmd, tmp_path, _env())


def test_migrated_generated_dump_trains_one_step(tmp_path, capsys) -> None:
    _trainer_or_skip()
    cfg = tmp_path / "config"
    cfg.mkdir()
    _migrate([str(HERE / "golden" / "old_full_dump.yaml"), "-o", str(cfg / "generated.yaml")], capsys)
    home = tmp_path / "home"
    for name in ("train", "test"):  # verl's dumped defaults: ~/data/rlhf/gsm8k/{train,test}.parquet
        _prompts(home / "data" / "rlhf" / "gsm8k" / f"{name}.parquet", "jpeg_compressibility")
    _run([*_module(cfg), "--config-name", "generated", MODEL, BACKEND, *SMALL], tmp_path, _env(home))


def test_migrated_ocr_lora_script_trains_one_step(tmp_path, capsys) -> None:
    """The OCR script, reward model and built-in `ocr` reward included: a tiny random Qwen2.5-VL on verl-core's HF
    backend reads the tiny Qwen-Image's images. Its prompt files are made by `examples/ocr/make_ocr_dataset.py`; the
    reward model gets only its path, backend and sizes."""
    _trainer_or_skip()
    from verl_core.testing.tiny_llm import build_tiny_vlm

    script = tmp_path / "run_qwen_image_ocr_lora.sh"
    shutil.copy(HERE / "golden" / "run_qwen_image_ocr_lora.sh", script)
    report = _migrate(["-i", "--no-backup", str(script)], capsys)
    assert "reward-fn-ocr-builtin" in report and "tokenizer_path" in report  # the OCR reward is the built-in one
    assert "not-implemented: reward.reward_model" not in report  # the reward model is implemented
    assert "reward_path=pkg://verl_omni.reward.ocr\n" in script.read_text()
    home = tmp_path / "home"
    make = _example_module(EXAMPLES / "ocr" / "make_ocr_dataset.py")
    make.write_dataset(home / "data" / "ocr", train_size=2, val_size=1)  # the script's $HOME/data/ocr/{train,test}
    vlm = build_tiny_vlm(tmp_path / "tiny-vlm")
    reward_model = [
        f"reward.reward_model.model_path={vlm}",  # the script's Qwen3-VL-8B
        "reward.reward_model.rollout.name=hf",  # the script's vLLM
        "reward.reward_model.rollout.tensor_model_parallel_size=1",  # the script's 4 GPUs
        "reward.reward_model.rollout.response_length=16",  # a random model never stops by itself
    ]
    _run(["bash", str(script), MODEL, BACKEND, *SMALL, *reward_model], tmp_path, _env(home))
    (metrics,) = list(tmp_path.rglob("metrics.jsonl"))
    (row,) = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
    assert 0.0 <= row["critic/rewards/min"] <= row["critic/rewards/max"] <= 1.0  # 1 - normalised edit distance


def test_migrated_diffusers_e2e_script_trains_one_step(tmp_path, capsys) -> None:
    """verl's own e2e script: its model path and GPU count come from its variables, the backend from `$@`."""
    _trainer_or_skip()
    script = tmp_path / "run_flowgrpo_trainer_diffusers.sh"
    shutil.copy(HERE / "golden" / "run_flowgrpo_trainer_diffusers.sh", script)
    _migrate(["-i", "--no-backup", str(script)], capsys)
    (tmp_path / "tests" / "special_e2e").mkdir(parents=True)
    (tmp_path / "tests" / "special_e2e" / "create_dummy_diffusion_data.py").write_text(_DUMMY_DATA)
    env = _env(tmp_path / "home")
    env.update(NUM_GPUS="1", MODEL_PATH="tiny://qwen_image")
    _run(["bash", str(script), BACKEND, *SMALL], tmp_path, env)
