"""`--validate`: the shipped key tree, Hydra compose with a verl-omni config folder, and verl-omni missing."""

import os
import subprocess
import sys

import pytest

from verl_migrate import validate, yaml_io
from verl_migrate.cli import main
from verl_migrate.keys import head_defaults
from verl_migrate.report import FileReport
from verl_migrate.yamldoc import YamlDoc

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")


def _config_folder(tmp_path) -> str:
    """Write a `diffusion_trainer.yaml` with verl-omni's key tree (nested), as verl-omni would ship it."""
    tree: dict = {}
    for key, value in head_defaults().items():
        node = tree
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value or "null"
    lines: list[str] = []

    def emit(node: dict, ind: int) -> None:
        for k, v in node.items():
            if isinstance(v, dict):
                lines.append(" " * ind + f"{k}:")
                emit(v, ind + 2)
            else:
                lines.append(" " * ind + f"{k}: {v!s}" if not v.startswith("${") else " " * ind + f"{k}: '{v}'")

    emit(tree, 0)
    folder = tmp_path / "omni_cfg"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "diffusion_trainer.yaml").write_text("\n".join(lines) + "\n")
    return str(folder)


@pytest.fixture
def key_tree_only(monkeypatch):
    """Validate against the shipped key tree, as when verl-omni ships no Hydra config (the fallback path)."""
    monkeypatch.setattr(validate, "omni_config_dir", lambda: None)


def test_migrated_dump_validates_against_the_key_tree(key_tree_only, capsys) -> None:
    assert main(["--validate", os.path.join(GOLDEN, "old_full_dump.migrated.yaml")]) == 0


def test_group_file_keys_are_validated_below_their_package(key_tree_only, tmp_path, capsys) -> None:
    p = tmp_path / "rollout.yaml"
    p.write_text("# @package actor_rollout_ref.rollout\nheight: 256\nbogus: 1\n")
    assert main(["--validate", str(p)]) == 1
    err = capsys.readouterr().err
    assert "validate: actor_rollout_ref.rollout.bogus: verl-omni has no such key" in err
    assert "pipeline.height" not in err  # the migrated key is checked as actor_rollout_ref.rollout.pipeline.height
    q = tmp_path / "plain.yaml"
    q.write_text("height: 256\n")
    assert main(["--validate", "--package", "actor_rollout_ref.rollout", str(q)]) == 0


def test_unknown_and_mistyped_keys_by_path(key_tree_only, tmp_path, capsys) -> None:
    p = tmp_path / "t.yaml"
    p.write_text("actor_rollout_ref:\n  model:\n    lora_rnak: 8\n    lora_rank: eight\n  hybrid_engine: yes please\n")
    assert main(["--validate", str(p)]) == 1
    err = capsys.readouterr().err
    assert (
        "actor_rollout_ref.model.lora_rnak: verl-omni has no such key; "
        "did you mean `actor_rollout_ref.model.lora_rank`?" in err
    )
    assert "actor_rollout_ref.model.lora_rank: expected int (verl-omni default 0), got str 'eight'" in err
    assert "actor_rollout_ref.hybrid_engine: expected bool" in err


def test_validate_script_overrides(key_tree_only, capsys) -> None:
    assert main(["--validate", os.path.join(GOLDEN, "run_qwen_image_ocr_lora.migrated.sh")]) == 0
    report = FileReport("x")
    n = validate.validate_overrides(["+trainer.total_epochs=3", "actor_rollout_ref.rollout.val_kwargs.seed=1"], report)
    assert n == 2
    msgs = {f.path: f.message for f in report.findings if f.category == "error"}
    assert "refuses `+`" in msgs["trainer.total_epochs"]
    assert "needs `+`" in msgs["actor_rollout_ref.rollout.val_kwargs.seed"]


@pytest.mark.slow
def test_compose_with_a_verl_omni_hydra_config(tmp_path) -> None:
    pytest.importorskip("hydra")
    folder = _config_folder(tmp_path)
    with open(os.path.join(GOLDEN, "old_full_dump.migrated.yaml"), encoding="utf-8") as fh:
        doc = YamlDoc(yaml_io.load(fh.read(), "x"), FileReport("x"))
    report = FileReport("x")
    errors = validate.compose_yaml(folder, doc, report)
    assert errors == 0, report.findings
    doc.set("actor_rollout_ref.model.lora_rnak", 8)
    assert validate.compose_yaml(folder, doc, report) == 1
    assert [f.path for f in report.findings] == ["actor_rollout_ref.model.lora_rnak"]
    report = FileReport("y")
    assert (
        validate.compose_overrides(
            folder, ["trainer.total_epochs=3", "actor_rollout_ref.rollout.pipeline.height=256"], report
        )
        == 0
    )
    assert validate.compose_overrides(folder, ["trainer.totl_epochs=3", "trainer.nnodes=2"], report) == 1
    assert [f.path for f in report.findings] == ["trainer.totl_epochs"]


def test_config_package_lookup(tmp_path, monkeypatch) -> None:
    folder = _config_folder(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(validate, "CONFIG_PACKAGE", os.path.basename(folder))
    assert validate.omni_config_dir() == folder


def test_validate_without_verl_omni_exits_2(tmp_path) -> None:
    import ruamel.yaml

    site = os.path.dirname(os.path.dirname(os.path.dirname(ruamel.yaml.__file__)))
    src = os.path.dirname(os.path.dirname(os.path.abspath(validate.__file__)))
    p = tmp_path / "a.yaml"
    p.write_text("trainer:\n  nnodes: 1\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, site])}
    res = subprocess.run(
        [sys.executable, "-S", "-m", "verl_migrate", "--validate", str(p)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert res.returncode == 2
    assert (
        "verl-omni is not installed" in res.stderr
        and "pip install ./packages/verl-core ./packages/verl-omni" in res.stderr
    )


def test_compose_reports_keys_this_project_does_not_implement(tmp_path) -> None:
    pytest.importorskip("hydra")
    folder = _config_folder(tmp_path)
    path = os.path.join(folder, "diffusion_trainer.yaml")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    start = text.index("distillation:\n")
    end = text.index("\nalgorithm:\n")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text[:start] + text[end + 1 :])
    doc = YamlDoc(yaml_io.load("distillation:\n  enabled: true\ntrainer:\n  nnodes: 2\n", "x"), FileReport("x"))
    report = FileReport("x")
    assert validate.compose_yaml(folder, doc, report) == 1
    (finding,) = report.findings
    assert finding.path == "distillation.enabled" and "does not implement it yet" in finding.message
