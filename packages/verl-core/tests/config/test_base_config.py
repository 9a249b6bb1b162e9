"""Tests for `verl_core.config.BaseConfig`: typing, validation, read-only, mapping access."""

from __future__ import annotations

import dataclasses
from typing import Literal

import pytest

from verl_core.config import BaseConfig, ConfigKeyError, ConfigTypeError, ConfigValueError


@dataclasses.dataclass
class SamplingDemo(BaseConfig):
    n: int = 1
    temperature: float = 1.0
    mode: Literal["sde", "cps"] = "sde"
    stop: list[str] = dataclasses.field(default_factory=list)
    seed: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("n", self.n >= 1, "int >= 1 (the group size)")
        self._require("temperature", self.temperature >= 0, "float >= 0")


@dataclasses.dataclass
class RolloutDemo(BaseConfig):
    _mutable_fields = frozenset({"step"})
    name: str = "hf"
    sampling: SamplingDemo = dataclasses.field(default_factory=SamplingDemo)
    shape: tuple[int, int] = (64, 64)
    step: int = 0


def test_base_config_accepts_and_widens_types():
    cfg = SamplingDemo(n=4, temperature=1, stop=["a"])
    assert cfg.temperature == 1.0 and isinstance(cfg.temperature, float)
    assert cfg.stop == ["a"]


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"n": "4"}, r"SamplingDemo\.n: expected int, got str '4'"),
        ({"n": True}, r"SamplingDemo\.n: expected int, got bool"),
        ({"temperature": "hot"}, r"SamplingDemo\.temperature: expected float"),
        ({"mode": "ode"}, r"SamplingDemo\.mode: expected one of 'sde', 'cps', got 'ode'"),
        ({"stop": ["a", 3]}, r"SamplingDemo\.stop\[1\]: expected str, got int 3"),
        ({"seed": 1.5}, r"SamplingDemo\.seed: expected int \| None, got float 1.5"),
    ],
)
def test_base_config_rejects_wrong_type_naming_the_key(kwargs, pattern):
    with pytest.raises(ConfigTypeError, match=pattern):
        SamplingDemo(**kwargs)


def test_base_config_validation_names_key_value_and_allowed():
    with pytest.raises(ConfigValueError, match=r"SamplingDemo\.n: expected int >= 1 \(the group size\), got 0") as e:
        SamplingDemo(n=0)
    assert e.value.key == "n"
    assert isinstance(e.value, ValueError)


def test_base_config_nested_dict_becomes_config_and_errors_carry_path():
    cfg = RolloutDemo(sampling={"n": 2})
    assert isinstance(cfg.sampling, SamplingDemo) and cfg.sampling.n == 2
    with pytest.raises(ConfigValueError, match=r"^sampling\.n: expected int >= 1"):
        RolloutDemo(sampling={"n": 0})


def test_base_config_tuple_from_list_and_length_checked():
    assert RolloutDemo(shape=[32, 48]).shape == (32, 48)
    with pytest.raises(ConfigTypeError, match=r"shape: expected 2 items"):
        RolloutDemo(shape=[1, 2, 3])


def test_base_config_is_read_only_except_mutable_fields():
    cfg = RolloutDemo()
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"RolloutDemo\.name is read-only"):
        cfg.name = "vllm"
    with pytest.raises(dataclasses.FrozenInstanceError):
        del cfg.name
    cfg.step = 3
    assert cfg.step == 3


def test_base_config_replace_revalidates():
    cfg = SamplingDemo(n=2)
    assert dataclasses.replace(cfg, n=8).n == 8
    assert cfg.evolve(temperature=0.5).temperature == 0.5
    with pytest.raises(ConfigValueError, match="n: expected int >= 1"):
        cfg.evolve(n=-1)


def test_base_config_mapping_access_like_hydra():
    cfg = RolloutDemo()
    assert cfg["name"] == "hf"
    assert cfg.get("name") == "hf"
    assert cfg.get("missing", 7) == 7
    assert "sampling" in cfg and "missing" not in cfg
    assert list(cfg) == ["name", "sampling", "shape", "step"]
    assert len(cfg) == 4
    assert dict(cfg)["shape"] == (64, 64)
    with pytest.raises(ConfigKeyError, match=r"RolloutDemo has no key 'nmae'; did you mean 'name'\?"):
        cfg["nmae"]
    with pytest.raises(KeyError):
        cfg["nmae"]


def test_base_config_to_dict_and_equality():
    cfg = RolloutDemo(sampling={"n": 3})
    assert cfg.to_dict()["sampling"] == {"n": 3, "temperature": 1.0, "mode": "sde", "stop": [], "seed": None}
    assert cfg == RolloutDemo(sampling=SamplingDemo(n=3))
    assert cfg != RolloutDemo()


def test_base_config_requires_dataclass_decorator():
    class NotADataclass(BaseConfig):
        pass

    with pytest.raises(TypeError, match=r"must be decorated with @dataclasses\.dataclass"):
        NotADataclass()
