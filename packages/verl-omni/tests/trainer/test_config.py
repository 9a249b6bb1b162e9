"""`diffusion_trainer` config: YAML = dataclass defaults, key checks with good messages, and `verl-omni-train` exiting
with status 2 before Ray starts."""

from __future__ import annotations

import dataclasses
import pathlib
import textwrap

import pytest
import yaml

from verl_core.config import ConfigKeyError, ConfigTypeError, ConfigValueError
from verl_omni.trainer.config import CONFIG_DIR, ActorRolloutRefConfig, DiffusionTrainerConfig, load_config
from verl_omni.trainer.main import EXIT_CONFIG, parse_args, run


@pytest.fixture(scope="module")
def default_config() -> DiffusionTrainerConfig:
    return load_config()


def _yaml_leaves(node, prefix=""):
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            yield from _yaml_leaves(value, path)
        else:
            yield path, value


def test_shipped_yaml_values_equal_the_dataclass_defaults(default_config):
    built = DiffusionTrainerConfig().to_dict()
    raw = yaml.safe_load((CONFIG_DIR / "diffusion_trainer.yaml").read_text())
    resolved = default_config.to_dict()
    differ = []
    for path, value in _yaml_leaves(raw):
        if path.endswith("_target_"):
            continue
        want, got = built, resolved
        for part in path.split("."):
            want, got = want[part], got[part]
        if want != got:
            differ.append(f"{path}: yaml {got!r} (raw {value!r}) != dataclass {want!r}")
    # the one deliberate difference: verl-omni's example model folder instead of an empty path
    assert differ == ["actor_rollout_ref.model.path: yaml '~/models/Qwen/Qwen-Image' (raw '~/models/Qwen/Qwen-Image') "
                      "!= dataclass ''"]  # fmt: skip


def test_every_dataclass_field_has_a_yaml_key():
    raw = yaml.safe_load((CONFIG_DIR / "diffusion_trainer.yaml").read_text())
    keys = {path for path, _ in _yaml_leaves(raw)} | {p.rsplit(".", 1)[0] for p, _ in _yaml_leaves(raw)}

    def fields(cls, prefix):
        for f in dataclasses.fields(cls):
            path = f"{prefix}.{f.name}" if prefix else f.name
            f.type if isinstance(f.type, type) else None
            yield path
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(default):
                yield from fields(type(default), path)

    missing = [p for p in fields(DiffusionTrainerConfig, "") if p not in keys]
    assert missing == []


def test_verl_omni_aliases_follow_their_source():
    config = load_config(["actor_rollout_ref.rollout.n=4", "data.train_batch_size=8", "trainer.n_gpus_per_node=1"])
    assert config.actor_rollout_ref.actor.rollout_n == config.actor_rollout_ref.ref.rollout_n == 4
    assert config.algorithm.adv_estimator == "flow_grpo"
    assert config.trainer.default_local_dir == "checkpoints/verl_examples/flow_grpo"


def test_the_group_size_has_one_home_rollout_n():
    # YAML: actor/ref.rollout_n are null and follow rollout.n; an explicit agreeing value is accepted
    config = load_config(["actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.rollout_n=2"])
    assert config.actor_rollout_ref.actor.rollout_n == config.actor_rollout_ref.ref.rollout_n == 2
    # Python API: no second default to disagree with
    arr = ActorRolloutRefConfig(rollout={"n": 4})
    assert arr.actor.rollout_n == arr.ref.rollout_n == 4
    with pytest.raises(ConfigValueError, match=r"ref\.rollout_n: 3 differs from actor_rollout_ref\.rollout\.n=4"):
        ActorRolloutRefConfig(rollout={"n": 4}, ref={"rollout_n": 3})


_SEPARATE = [
    "trainer.mode=separate",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.free_cache_engine=false",
]


@pytest.mark.parametrize(
    ("overrides", "error", "match"),
    [
        (["trainer.totl_epochs=3"], ConfigKeyError, r"trainer\.totl_epochs: unknown key .*Did you mean 'total_epochs'"),
        (["trainer.total_epochs=abc"], ConfigTypeError, r"trainer\.total_epochs: expected int, got str 'abc'"),
        (["actor_rollout_ref.actor.fsdp_config.compile_blocks=maybe"], ConfigTypeError,
         r"actor_rollout_ref\.actor\.fsdp_config\.compile_blocks: expected bool \| None, got str 'maybe'"),
        (["actor_rollout_ref.ref.fsdp_config.compile_blocks=3"], ConfigTypeError,
         r"actor_rollout_ref\.ref\.fsdp_config\.compile_blocks: expected bool \| None, got int 3"),
        (["actor_rollout_ref.actor.fsdp_config.cudnn_sdpa=auto"], ConfigTypeError,
         r"actor_rollout_ref\.actor\.fsdp_config\.cudnn_sdpa: expected bool \| None, got str 'auto'"),
        (["+global_profiler.tool=nsys"], ConfigKeyError, r"global_profiler: the profiler is not implemented"),
        (["+actor_rollout_ref.actor.use_distill_loss=true"], ConfigKeyError,
         r"actor_rollout_ref\.actor\.use_distill_loss: diffusion distillation is not implemented"),
        (["trainer.use_v1=true"], ConfigValueError, r"trainer\.use_v1: expected false .*not implemented"),
        (["actor_rollout_ref.actor.rollout_n=3"], ConfigValueError,
         r"actor_rollout_ref\.actor\.rollout_n: 3 differs from actor_rollout_ref\.rollout\.n=1"),
        (["actor_rollout_ref.ref.rollout_n=3"], ConfigValueError,
         r"actor_rollout_ref\.ref\.rollout_n: 3 differs from actor_rollout_ref\.rollout\.n=1"),
        (["data.train_batch_size=3", "trainer.n_gpus_per_node=2"], ConfigValueError,
         r"data\.train_batch_size: 3 prompts .* do not split over 2 actor ranks"),
        (["trainer.resume_mode=resume_path"], ConfigValueError, r"trainer\.resume_from_path: expected a checkpoint"),
        (["algorithm.rollout_correction.rollout_is=sequence"], ConfigValueError,
         r"rollout_is: expected null or 'token'"),
        (["algorithm.rollout_correction.rollout_is=token"], ConfigValueError,
         r"rollout_is: 'token' corrects the staleness of trainer\.mode=separate"),
        (["trainer.mode=separate"], ConfigValueError,
         r"actor_rollout_ref\.rollout\.nnodes: 0: trainer\.mode=separate .*or trainer\.separate\.share_devices=true"),
        (["trainer.mode=separate", "actor_rollout_ref.rollout.nnodes=1"], ConfigValueError,
         r"actor_rollout_ref\.rollout\.free_cache_engine: true: trainer\.mode=separate .* never sleep"),
        ([*_SEPARATE, "reward.stream=true"], ConfigValueError,
         r"reward\.stream: true: trainer\.mode=separate"),
        ([*_SEPARATE, "algorithm.rollout_correction.bypass_mode=true"], ConfigValueError,
         r"rollout_correction\.bypass_mode: true: in trainer\.mode=separate"),
        (["trainer.separate.max_off_policy_threshold=-1"], ConfigValueError,
         r"trainer\.separate\.max_off_policy_threshold: expected an int >= 0"),
        (["trainer.separate.parameter_sync_step=3"], ConfigValueError,
         r"trainer\.separate\.max_off_policy_threshold: expected >= parameter_sync_step - 1 = 2"),
        (["trainer.separate.queue_timeout_s=0"], ConfigValueError, r"trainer\.separate\.queue_timeout_s: expected"),
        (["trainer.separate.max_restarts=-1"], ConfigValueError,
         r"trainer\.separate\.max_restarts: expected an int >= 0"),
        (["trainer.separate.on_rollout_failure=retry"], ConfigTypeError,
         r"trainer\.separate\.on_rollout_failure: expected .*'fail'.*'restart'"),
        ([*_SEPARATE, "trainer.separate.share_devices=true"], ConfigValueError,
         r"actor_rollout_ref\.rollout\.nnodes: 1 with trainer\.separate\.share_devices=true: .*rollout\.nnodes=0 or"),
        (["actor_rollout_ref.hybrid_engine=false"], ConfigValueError, r"hybrid_engine: expected true"),
        (["trainer.logger=[console,mlflow]"], ConfigValueError, r"trainer\.logger: .*unknown: \['mlflow'\]"),
        (["trainer.nnodes=2"], ConfigValueError,
         r"actor_rollout_ref\.rollout\.host: '127\.0\.0\.1' is reachable only from its own node.*=0\.0\.0\.0"),
        (["reward.reward_manager.name=naive"], ConfigValueError,
         r"reward\.reward_manager\.name: unknown reward manager 'naive'.*use `visual`"),
        (["actor_rollout_ref.rollout.request_timeout_s=0"], ConfigValueError,
         r"actor_rollout_ref\.rollout\.request_timeout_s: .*timeout in seconds > 0"),
    ],
)  # fmt: skip
def test_bad_keys_are_rejected_naming_the_key(overrides, error, match):
    with pytest.raises(error, match=match):
        load_config(overrides)


def test_verl_omni_keys_of_features_left_off_are_accepted_and_ignored():
    config = load_config(
        [
            "+trainer.esi_redundant_time=0",
            "+trainer.rollout_data_dir=null",
            "+global_profiler.tool=null",
            "+actor_rollout_ref.actor.profiler.enable=false",
            "+trainer.critic_warmup=0",
        ]
    )
    assert config.trainer.total_epochs == 30


def test_a_user_config_can_extend_diffusion_trainer(tmp_path):
    (tmp_path / "mine.yaml").write_text(
        textwrap.dedent(
            """
            defaults:
              - diffusion_trainer
              - _self_
            trainer:
              total_training_steps: 7
            """
        )
    )
    config = load_config(["trainer.n_gpus_per_node=2"], config_name="mine", config_dir=str(tmp_path))
    assert (config.trainer.total_training_steps, config.trainer.n_gpus_per_node) == (7, 2)


def test_the_config_depends_on_the_command_and_config_name_never_on_overrides(capsys):
    from verl_omni.trainer import main_diffusion

    assert parse_args([]).config_name == "quickstart"
    assert parse_args(["trainer.total_epochs=1"]).config_name == "quickstart"
    assert parse_args(["-cn", "diffusion_trainer", "trainer.total_epochs=1"]).config_name == "diffusion_trainer"
    # `verl-omni-train trainer.total_training_steps=2` is the quickstart with two steps
    assert run(["--cfg", "trainer.total_training_steps=2"]) == 0
    out = capsys.readouterr().out
    assert "experiment_name: quickstart" in out and "path: tiny://qwen_image" in out
    # upstream's module (migrated scripts, the compat shim) keeps the full recipe, with or without overrides
    assert main_diffusion.run(["--cfg"]) == 0 and "experiment_name: flow_grpo" in capsys.readouterr().out
    assert main_diffusion.run(["--cfg", "trainer.total_training_steps=2"]) == 0
    assert "experiment_name: flow_grpo" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("entry", "argv", "used", "other"),
    [
        ("main", ["actor_rollout_ref.model.path=/nonexistent/model"], "quickstart",
         "`verl-omni-train --config-name diffusion_trainer actor_rollout_ref.model.path=<folder>` selects the full"),
        ("main", ["-cn", "diffusion_trainer", "trainer.total_training_steps=2"], "diffusion_trainer",
         "`verl-omni-train --config-name quickstart` selects the built-in quickstart"),
        ("main_diffusion", ["trainer.total_training_steps=2"], "diffusion_trainer",
         "`python -m verl_omni.trainer.main_diffusion --config-name quickstart` selects the built-in quickstart"),
    ],
)  # fmt: skip
def test_a_missing_model_names_the_config_in_use_and_the_command_for_the_other(
    entry, argv, used, other, no_ray, capsys, monkeypatch, tmp_path
):
    import importlib

    monkeypatch.setenv("HOME", str(tmp_path))  # the full recipe's ~/models/Qwen/Qwen-Image is surely missing
    assert importlib.import_module(f"verl_omni.trainer.{entry}").run(argv) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "actor_rollout_ref.model.path: " in err and "does not exist" in err
    assert f"This command uses the config `{used}`; {other}" in err, err


@pytest.fixture
def no_ray(monkeypatch):
    """Fail the test if anything tries to start Ray."""
    import ray

    def refuse(*args, **kwargs):
        raise AssertionError("ray.init was called: the config error must come before any worker starts")

    monkeypatch.setattr(ray, "init", refuse)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["trainer.totl_epochs=3"], r"trainer\.totl_epochs: unknown key .*Did you mean 'total_epochs'"),
        (["trainer.total_epochs=[1]"], r"trainer\.total_epochs: expected int"),
        (["actor_rollout_ref.actor.diffusion_loss.loss_mode=flow_grop"],
         r"actor_rollout_ref\.actor\.diffusion_loss\.loss_mode: unknown loss 'flow_grop'; did you mean 'flow_grpo'\? "
         r"registered: (\w+, )*flow_grpo, grpo_guard\b.*register_loss"),
        (["--config-name", "quickstart", "actor_rollout_ref.model.path=/nonexistent/model"],
         r"actor_rollout_ref\.model\.path: /nonexistent/model does not exist"),
        (["--config-name", "quickstart", "data.train_files=/nonexistent/prompts.txt"], r"/nonexistent/prompts\.txt"),
        (["--config-name", "quickstart", "trainer.logger=[console,wandb]"], r"wandb"),
        (["--config-name", "quickstart", "reward.custom_reward_function.path=/nonexistent/reward.py"],
         r"reward\.custom_reward_function\.path.*/nonexistent/reward\.py"),
    ],
)  # fmt: skip
def test_cli_exits_with_status_2_naming_the_key_before_ray(argv, match, no_ray, capsys, tmp_path, monkeypatch):
    if "wandb" in match and _has("wandb"):
        pytest.skip("wandb is installed: the missing-extra message cannot be shown")
    monkeypatch.setenv("VERL_OMNI_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    assert run(argv) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "verl-omni-train: config error: " in err
    import re

    assert re.search(match, err), err


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_cfg_prints_the_composed_config(capsys):
    assert run(["--cfg", "trainer.total_epochs=2"]) == 0
    out = capsys.readouterr().out
    assert "total_epochs: 2" in out and "actor_rollout_ref:" in out


def test_tiny_model_path_is_built_once_and_cached(tmp_path, monkeypatch):
    from verl_omni.trainer.components import resolve_model_path

    monkeypatch.setenv("VERL_OMNI_CACHE", str(tmp_path))
    folder = resolve_model_path("tiny://qwen_image")
    assert (folder / "model_index.json").is_file() and folder.parent == tmp_path / "tiny"
    stamp = (folder / "model_index.json").stat().st_mtime_ns
    assert resolve_model_path("tiny://qwen_image") == folder
    assert (folder / "model_index.json").stat().st_mtime_ns == stamp
    with pytest.raises(ValueError, match=r"actor_rollout_ref\.model\.path='tiny://qwen_image/huge'"):
        resolve_model_path("tiny://qwen_image/huge")
    assert pathlib.Path(folder).name == "qwen_image-tiny-seed0"


def test_config_reference_page_is_up_to_date():
    import importlib.util

    root = pathlib.Path(__file__).resolve().parents[4]
    spec = importlib.util.spec_from_file_location("gen_config_reference", root / ".ci" / "gen_config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = root / "docs" / "omni" / "config_reference.md"
    assert page.read_text() == module.render(), "stale: run `python .ci/gen_config_reference.py`"
    assert "| `worker_timeout_s` | float | `1800.0` |" in page.read_text()


@pytest.mark.parametrize(
    ("overrides", "rank"),
    [
        pytest.param(["actor_rollout_ref.model.lora_rank=16"], 16, id="lora-actor-takes-the-actor-rank"),
        pytest.param(["actor_rollout_ref.model.lora_rank=16", "actor_rollout_ref.rollout.lora.rank=64"], 64,
                     id="set-by-hand-is-kept"),
        pytest.param([], 0, id="full-fine-tuning-serves-no-adapter"),
    ],
)  # fmt: skip
def test_served_rollout_config_holds_adapters_of_the_actor_rank(overrides, rank):
    """On the GPU, `rollout.name=vllm_omni` with a LoRA actor refused the first sync ("rollout.lora.rank is 0"):
    the servers' LoRA slots follow the actor's rank unless set."""
    from verl_omni.trainer.components import served_rollout_config

    config = load_config(["actor_rollout_ref.model.path=/m", *overrides])
    served = served_rollout_config(config.actor_rollout_ref, "cpu")
    assert served.lora.rank == rank and served.model.path == "/m" and served.device == "cpu"


def test_ctrl_c_while_checking_the_config_exits_130_with_one_line(no_ray, capsys, monkeypatch):
    from verl_omni.trainer import components
    from verl_omni.trainer.main import EXIT_INTERRUPTED

    def interrupted(config):
        raise KeyboardInterrupt

    monkeypatch.setattr(components, "preflight", interrupted)
    assert run([]) == EXIT_INTERRUPTED
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("verl-omni-train:")]
    assert lines == ["verl-omni-train: interrupted while checking the config; nothing was started"], err
    assert "Traceback" not in err
