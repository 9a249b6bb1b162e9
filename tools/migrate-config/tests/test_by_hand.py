"""Golden pairs written by hand from the key tables (`by_hand/README.md`): a regression in a rule cannot be
re-blessed by regenerating them."""

import os

import pytest

from verl_migrate import migrate_script_text, migrate_yaml_text

TARGET = "project"  # written for this project's trainer config
HERE = os.path.dirname(__file__)
PAIRS = [
    ("pre6200/config/diffusion_trainer.yaml", "by_hand/diffusion_trainer.expected.yaml"),
    ("golden/run_qwen_image_ocr_lora.sh", "by_hand/run_qwen_image_ocr_lora.expected.sh"),
]


def _read(rel: str) -> str:
    with open(os.path.join(HERE, rel), encoding="utf-8") as fh:
        return fh.read()


@pytest.mark.parametrize(("source", "expected"), PAIRS, ids=[os.path.basename(s) for s, _ in PAIRS])
def test_migration_matches_the_hand_written_result(source: str, expected: str) -> None:
    run = migrate_script_text if source.endswith(".sh") else migrate_yaml_text
    out, _ = run(_read(source), os.path.join(HERE, source))
    assert out.splitlines() == _read(expected).splitlines()
    assert out == _read(expected)


def test_gen_golden_does_not_write_the_hand_written_files() -> None:
    with open(os.path.join(HERE, "..", "scripts", "gen_golden.py"), encoding="utf-8") as fh:
        assert "by_hand" not in fh.read()
