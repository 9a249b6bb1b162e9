"""The typed trainer <-> actor-rank interface: `ActorWorkerAPI`, the proxy `ActorGroup`, and its start-up check."""

from __future__ import annotations

import inspect
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from tensordict import TensorDict

from verl_omni.trainer.actor_group import ActorGroup, ActorWorkerAPI
from verl_omni.trainer.worker_proxy import (
    EveryRank,
    RankGroup,
    SplitRanks,
    WorkerError,
    WorkerInterfaceError,
    check_worker,
    describe_remote_error,
    protocol_methods,
)
from verl_omni.trainer.workers import ActorWorker

TRAINER = pathlib.Path(__file__).parents[2] / "src" / "verl_omni" / "trainer"


def test_the_actor_worker_implements_every_method_of_its_protocol():
    ActorGroup(ActorWorker, [], [], timeout_s=1.0)  # raises WorkerInterfaceError otherwise


def test_every_protocol_method_has_a_typed_proxy_attribute():
    """No method the trainer may call is reachable only by its name as a string."""
    proxied = {name for name, v in vars(ActorGroup).items() if isinstance(v, EveryRank | SplitRanks)}
    assert proxied == set(protocol_methods(ActorWorkerAPI))


def test_no_method_name_strings_in_the_trainer():
    """The trainer calls the proxy's attributes; `.call("name")` / `run_split("name")` are gone for good."""
    for path in TRAINER.glob("*.py"):
        text = path.read_text()
        assert '.call("' not in text and "run_split(" not in text, path.name


class _Missing(ActorWorker):
    compute_ref = None  # type: ignore[assignment]


class _ExtraRequired(ActorWorker):
    def update_policy(self, batch, scale):  # type: ignore[override]
        return {}


class _RenamedParameter(ActorWorker):
    def load_checkpoint(self, folder):  # type: ignore[override]
        return 0


class _DefaultDropped(ActorWorker):
    def push_weights(self, targets, version, bucket_bytes, timeout_s, dtype=None):  # type: ignore[override]
        return {}


class _OptionalExtra(ActorWorker):
    def update_policy(self, batch, scale=1.0):  # an added parameter with a default: every call still binds
        return {}


@pytest.mark.parametrize(
    ("worker", "method", "why"),
    [
        (_Missing, "compute_ref", r"missing \(the ActorWorkerAPI Protocol declares compute_ref\(self, batch"),
        (_ExtraRequired, "update_policy", r"\(self, batch, scale\) cannot take every argument"),
        (_RenamedParameter, "load_checkpoint", r"\(self, folder\) cannot take the arguments by name"),
        (_DefaultDropped, "push_weights", r"cannot take every argument of ActorWorkerAPI\.push_weights"),
    ],
)
def test_a_wrong_worker_class_fails_at_proxy_construction_naming_role_and_method(worker, method, why):
    with pytest.raises(WorkerInterfaceError, match=rf"^actor worker class {worker.__name__} does not implement "
                       rf"ActorWorkerAPI: {method}: .*{why}"):  # fmt: skip
        ActorGroup(worker, [], [], timeout_s=1.0)
    with pytest.raises(WorkerInterfaceError, match=method):
        check_worker("actor", ActorWorkerAPI, worker)


def test_an_added_parameter_with_a_default_is_compatible():
    check_worker("actor", ActorWorkerAPI, _OptionalExtra)


def test_build_components_checks_the_worker_class_before_ray_starts(monkeypatch):
    from verl_omni.trainer import components

    monkeypatch.setattr(components, "ActorWorker", _Missing)
    monkeypatch.setattr(components, "init_ray", lambda *a, **k: pytest.fail("Ray started before the check"))
    with pytest.raises(WorkerInterfaceError, match="compute_ref: missing"):
        components.build_components(None)  # type: ignore[arg-type]


def test_a_proxy_attribute_must_carry_the_protocol_methods_name():
    with pytest.raises(Exception) as raised:  # Python 3.11 wraps an error of __set_name__ in a RuntimeError

        class _Typo(RankGroup):
            update = SplitRanks(ActorWorkerAPI.update_policy)

    error = raised.value.__cause__ or raised.value
    assert isinstance(error, TypeError)
    assert str(error) == "_Typo.update proxies the worker method 'update_policy': name it update_policy"


def test_the_old_paths_re_export():
    from verl_core.rollout.weight_push import WeightPusher
    from verl_omni.trainer import interfaces, protocols, weight_push, workers

    assert weight_push.WeightPusher is WeightPusher
    assert workers.ActorGroup is ActorGroup and workers.WorkerError is WorkerError
    assert protocols.ActorRanks is interfaces.ActorRanks is ActorGroup


class _Echo:
    """A worker of a small role, run on real Ray actors."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def rows(self, batch: TensorDict) -> list[int]:
        return [self.rank, *batch["x"].tolist()]

    def scaled(self, factor: float, *, offset: float = 0.0) -> float:
        if factor < 0 and self.rank == 1:
            raise ValueError("negative factor on rank 1")
        return self.rank * factor + offset

    def broken(self) -> None:
        _fail_like_cudnn()

    def dies(self) -> None:
        os._exit(3)  # the process goes mid-call, as under the OOM killer or a segfault


# what torch raised in cuDNN's SDPA backward on the H200: the cause on the first line, a C++ trace, CUDA's advice last
_CUDNN_ERROR = (
    "Expected mha_graph.execute(handle, variant_pack, workspace_ptr.get()).is_good() to be true, but got false.\n"
    "Exception raised from run_cudnn_SDP_bprop at aten/src/ATen/native/cudnn/MHA.cpp:1234\n"
    "frame #0: c10::Error::Error(...)\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
)


def _fail_like_cudnn() -> None:
    raise RuntimeError(_CUDNN_ERROR)


class _EchoAPI(_Echo):  # the Protocol role: the same surface (a Protocol would be written alike)
    pass


class _EchoGroup(RankGroup):
    role = "echo"
    protocol = _EchoAPI
    rows = SplitRanks(_EchoAPI.rows)
    scaled = EveryRank(_EchoAPI.scaled)
    broken = EveryRank(_EchoAPI.broken)
    dies = EveryRank(_EchoAPI.dies)


def test_the_proxy_splits_and_fans_out_over_real_ray_actors(ray_session):
    ray = ray_session
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    handles = [ray.remote(_Echo).options(num_cpus=0.1).remote(rank) for rank in range(2)]
    group = _EchoGroup(_Echo, handles, [{"ip": "here", "pid": 1}, {"ip": "here", "pid": 2}], timeout_s=60.0)
    try:
        assert group.rows(TensorDict({"x": torch.arange(4)}, batch_size=[4])) == [[0, 0, 1], [1, 2, 3]]
        assert group.scaled(2.0, offset=0.5) == [0.5, 2.5]
        with pytest.raises(WorkerError, match=r"echo worker rank 1 \(node here, pid 2\) failed in scaled: .*negative"):
            group.scaled(-1.0)
        # the root cause, not Ray's banner and CUDA's last line: type, first line, the raising frame
        with pytest.raises(WorkerError) as failed:
            group.broken()
        message = str(failed.value)
        who = r"echo worker rank \d \(node here, pid \d\)"
        assert re.match(rf"{who} failed in broken: RuntimeError: Expected mha_graph", message)
        assert "is_good() to be true, but got false." in message and "TORCH_USE_CUDA_DSA" not in message
        assert message.endswith(f"(at {__file__}:{_fail_like_cudnn.__code__.co_firstlineno + 1} in _fail_like_cudnn)")
        with pytest.raises(ValueError, match="batch of 3 samples does not split over 2 echo ranks"):
            group.rows(TensorDict({"x": torch.arange(3)}, batch_size=[3]))
        # a rank whose process dies mid-call: the rank, the call, the actor class and Ray's own reason for the death
        with pytest.raises(WorkerError) as died:
            group.dies()
        message = str(died.value)
        headline = rf"{who} died during dies: ActorDiedError \(actor class _Echo\): The actor died"
        assert re.match(headline, message), message
        assert "Worker exit type:" in message and "Worker exit detail:" in message, message
        assert "Some common causes" not in message and "OOM killer" in message, message
    finally:
        for handle in handles:
            ray.kill(handle)


_MISTAKES = """
from tensordict import TensorDict
from verl_omni.trainer.actor_group import ActorGroup

def use(actor: ActorGroup, batch: TensorDict) -> None:
    metrics: dict[str, float] = actor.update_policy(batch)[0]
    actor.update_polcy(batch)
    actor.push_weights(["http://a"], 1)
    actor.refresh_old_policy("half")
    steps: int = actor.load_checkpoint("/ckpt")
"""


def _mypy(tmp_path: pathlib.Path, *files: str) -> list[str]:
    """mypy's error lines for `files`; torch, Ray and the other big libraries are skipped (seconds, not minutes)."""
    pytest.importorskip("mypy")
    config = tmp_path / "mypy.ini"
    skipped = "torch.*,ray.*,tensordict.*,diffusers.*,transformers.*,peft.*,numpy.*,PIL.*,omegaconf.*,hydra.*"
    config.write_text(f"[mypy]\nfollow_imports = silent\nignore_missing_imports = True\ncache_dir = {tmp_path}/cache\n"
                      f"[mypy-{skipped}]\nfollow_imports = skip\n")  # fmt: skip
    command = [sys.executable, "-m", "mypy", "--config-file", str(config), "--no-error-summary", *files]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, env=os.environ.copy())
    return [line for line in out.stdout.splitlines() if ": error:" in line]


def test_the_type_checker_flags_a_typo_a_wrong_arity_and_wrong_types(tmp_path):
    """Mutation run by hand: `EveryRank.__get__`'s overload typed `-> Any`: FAILED (mypy flagged only the typo)."""
    snippet = tmp_path / "mistakes.py"
    snippet.write_text(textwrap.dedent(_MISTAKES))
    errors = _mypy(tmp_path, str(snippet))
    lines = {int(e.split(":")[1]) for e in errors}
    assert lines == {7, 8, 9, 10}, errors  # 6 is right; 10: a list (one result per rank), not an int
    assert any('"ActorGroup" has no attribute "update_polcy"' in e for e in errors), errors


def test_the_whole_trainer_package_type_checks(tmp_path):
    """mypy finds no error in any module of `verl_omni/trainer/` (the proxy calls, the step loop, the configs)."""
    modules = sorted(TRAINER.rglob("*.py"))
    calls = [line for path in modules for line in path.read_text().splitlines() if "actor." in line or "start." in line]
    assert len(modules) > 20 and len(calls) > 10  # the package and its calls through the proxy are all there
    errors = _mypy(tmp_path, str(TRAINER))
    assert errors == [], "\n".join(errors)


def test_protocol_methods_are_the_declared_ones():
    assert "update_policy" in protocol_methods(ActorWorkerAPI)
    assert all(inspect.isfunction(f) for f in protocol_methods(ActorWorkerAPI).values())


def _task_error(cause: BaseException, traceback_text: str):
    from ray.exceptions import RayTaskError

    return RayTaskError("m", traceback_text, cause, proctitle="ray::W.m()", pid=7, ip="10.0.0.2")


def test_describe_remote_error_unwraps_nested_causes_skips_torch_frames_and_cuts_long_lines():
    own = '  File "/venv/lib/python3.12/site-packages/verl_omni/engine/clean_update.py", line 42, in backward\n'
    torch_frames = (
        '  File "/venv/lib/python3.12/site-packages/torch/autograd/__init__.py", line 9, in backward\n'
        '  File "/tmp/torchinductor_me/ab/cab.py", line 3, in call\n'
    )
    remote = f"Traceback (most recent call last):\n{own}{torch_frames}RuntimeError: boom"
    nested = _task_error(_task_error(RuntimeError("x" * 400 + "\nsecond line"), remote), remote)
    described = describe_remote_error(nested)
    assert described == "RuntimeError: " + "x" * 283 + "... (at verl_omni/engine/clean_update.py:42 in backward)"
    assert describe_remote_error(_task_error(KeyError("k"), torch_frames)) == "KeyError: 'k'"  # no own frame
    # not a task error (a dead actor): first and last lines, as Ray puts the reason last
    died = RuntimeError("The actor died unexpectedly.\n\tclass_name: W\n\tpid: 7\nits worker process has died")
    assert describe_remote_error(died) == "The actor died unexpectedly. ... its worker process has died"
