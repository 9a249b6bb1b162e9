"""`verl_migrate.compose._problems`: a config that does not resolve is always reported, with its cause."""

from __future__ import annotations

from omegaconf import OmegaConf

from verl_migrate import compose


def test_problems_names_the_key_that_does_not_resolve():
    cfg = OmegaConf.create({"a": "${nope}", "b": 1})
    found = compose._problems(cfg, OmegaConf.create({"a": 1, "b": 1}))
    assert any(key == "a" and "does not resolve" in why for key, why in found), found


def test_problems_reports_the_whole_config_when_no_key_fails_alone(monkeypatch):
    def refuse(*args, **kwargs):
        raise ValueError("cyclic interpolation across nodes")

    monkeypatch.setattr(OmegaConf, "to_container", refuse)
    cfg = OmegaConf.create({"a": 1})
    found = compose._problems(cfg, OmegaConf.create({"a": 1}))
    assert ("<config>", "does not resolve: ValueError: cyclic interpolation across nodes") in found
