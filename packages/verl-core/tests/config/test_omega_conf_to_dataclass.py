"""Tests for `verl_core.config.omega_conf_to_dataclass`."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from verl_core.config import (
    BaseConfig,
    ConfigKeyError,
    ConfigTypeError,
    ConfigValueError,
    omega_conf_to_dataclass,
)


@dataclasses.dataclass
class OptimDemo(BaseConfig):
    lr: float = 1e-4
    betas: tuple[float, float] = (0.9, 0.999)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("lr", self.lr > 0, "float > 0")


@dataclasses.dataclass
class AdamWDemo(OptimDemo):
    weight_decay: float = 0.0


@dataclasses.dataclass
class ActorDemo(BaseConfig):
    optim: OptimDemo = dataclasses.field(default_factory=OptimDemo)
    ppo_micro_batch_size: int = 4
    name: str = "actor"


@dataclasses.dataclass
class PlainDemo:
    required: int
    label: str = "x"


_T = f"{__name__}"


def test_builds_from_target_with_nested_target_subclass():
    node = OmegaConf.create(
        {
            "_target_": f"{_T}.ActorDemo",
            "optim": {"_target_": f"{_T}.AdamWDemo", "lr": 3e-4, "weight_decay": 0.01},
            "ppo_micro_batch_size": 8,
        }
    )
    cfg = omega_conf_to_dataclass(node)
    assert isinstance(cfg, ActorDemo)
    assert isinstance(cfg.optim, AdamWDemo) and cfg.optim.weight_decay == 0.01
    assert cfg.ppo_micro_batch_size == 8


def test_builds_with_explicit_type_and_resolves_interpolations():
    node = OmegaConf.create({"base_lr": 2e-4, "actor": {"optim": {"lr": "${base_lr}"}, "name": "a"}})
    cfg = omega_conf_to_dataclass(node.actor, ActorDemo)
    assert cfg.optim.lr == 2e-4


def test_unknown_key_is_named_with_path_and_suggestion():
    node = OmegaConf.create({"optim": {"lrr": 1.0}})
    with pytest.raises(ConfigKeyError, match=r"optim\.lrr: unknown key for OptimDemo\. Did you mean 'lr'\?"):
        omega_conf_to_dataclass(node, ActorDemo)


def test_wrong_type_is_named_with_path():
    node = OmegaConf.create({"optim": {"betas": [0.9, "x"]}})
    with pytest.raises(ConfigTypeError, match=r"optim\.betas\[1\]: expected float, got str 'x'"):
        omega_conf_to_dataclass(node, ActorDemo)


def test_validation_error_is_named_with_path_and_source():
    node = OmegaConf.create({"optim": {"lr": -1}})
    with pytest.raises(ConfigValueError, match=r"^run\.yaml: optim\.lr: expected float > 0, got -1\.0"):
        omega_conf_to_dataclass(node, ActorDemo, source="run.yaml")


def test_missing_required_and_missing_value():
    with pytest.raises(ConfigKeyError, match=r"required: missing required key for PlainDemo"):
        omega_conf_to_dataclass({"label": "y"}, PlainDemo)
    with pytest.raises(ConfigValueError, match=r"name: MissingMandatoryValue"):
        omega_conf_to_dataclass(OmegaConf.create({"name": "???"}), ActorDemo)


def test_plain_dataclass_values_are_type_checked():
    assert omega_conf_to_dataclass({"required": 3}, PlainDemo) == PlainDemo(required=3)
    with pytest.raises(ConfigTypeError, match=r"PlainDemo\.required: expected int"):
        omega_conf_to_dataclass({"required": "3"}, PlainDemo)


@pytest.mark.parametrize(
    ("target", "pattern"),
    [
        ("nodots", r"_target_: expected a dotted import path"),
        ("no_such_module_xyz.Thing", r"cannot import module 'no_such_module_xyz'"),
        (f"{_T}.Missing", r"has no attribute 'Missing'"),
        (f"{_T}.pytest", r"is not a subclass of the expected ActorDemo"),
    ],
)
def test_bad_target_is_a_clear_error(target, pattern):
    with pytest.raises((ConfigValueError, ConfigTypeError), match=pattern):
        omega_conf_to_dataclass({"_target_": target}, ActorDemo)


def test_no_target_and_no_type():
    with pytest.raises(ConfigKeyError, match="has no _target_ and no dataclass_type"):
        omega_conf_to_dataclass({"lr": 1.0})


def test_root_must_be_mapping():
    with pytest.raises(ConfigTypeError, match="expected a mapping node, got list"):
        omega_conf_to_dataclass(OmegaConf.create([1, 2]), ActorDemo)
