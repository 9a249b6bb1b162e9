"""`verl-migrate-config --imports`: old verl diffusion imports rewritten from the mapping, formatting kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_migrate.cli import main
from verl_migrate.imports_rewrite import rewrite_imports

BEFORE = '''"""A user's reward file."""
# leading comment
from verl.workers.config import DiffusionModelConfig, DiffusionRolloutConfig as RC  # configs
from verl.trainer.diffusion.diffusion_algos import (
    compute_flow_grpo_outcome_advantage,  # keeps old signature
    kl_penalty_image,
)
from verl.trainer.diffusion.ray_diffusion_trainer import RayFlowGRPOTrainer
from examples.flowgrpo_trainer.scheduler import FlowMatchSDEDiscreteScheduler
import os


def f( a,b ):   # odd spacing stays
    return DiffusionModelConfig, RC, kl_penalty_image
'''

AFTER = '''"""A user's reward file."""
# leading comment
from verl_omni.config import DiffusionModelConfig, DiffusionRolloutConfig as RC  # configs
from verl.trainer.diffusion.diffusion_algos import (
    compute_flow_grpo_outcome_advantage,  # keeps old signature
    )
from verl_omni.algos import kl_penalty_historical as kl_penalty_image
from verl.trainer.diffusion.ray_diffusion_trainer import RayFlowGRPOTrainer
from verl_omni.schedulers import FlowMatchSDEDiscreteScheduler
import os


def f( a,b ):   # odd spacing stays
    return DiffusionModelConfig, RC, kl_penalty_image
'''


def test_before_after() -> None:
    new, edits = rewrite_imports(BEFORE)
    assert new == AFTER
    manual = {e.old: e.message for e in edits if e.action == "manual"}
    assert (
        "the call signature changed"
        in manual["from verl.trainer.diffusion.diffusion_algos import compute_flow_grpo_outcome_advantage"]
    )
    assert manual["from verl.trainer.diffusion.ray_diffusion_trainer import RayFlowGRPOTrainer"].startswith(
        "not provided by verl-compat"
    )
    assert rewrite_imports(AFTER)[0] == AFTER  # idempotent


@pytest.mark.parametrize(
    "code",
    [
        "import os\nfrom verl_omni.config import DiffusionModelConfig  # new already\n",
        "from verl.utils.torch_functional import masked_mean\n",  # upstream verl, not a diffusion path
        "from . import verl\nx = {'a':1}\n",
    ],
)
def test_unrelated_code_is_untouched(code: str) -> None:
    assert rewrite_imports(code) == (code, [])


def test_star_and_module_imports_are_reported_not_rewritten() -> None:
    code = "from verl.trainer.diffusion.diffusion_algos import *\nimport verl.models.diffusers_model.base as b\n"
    new, edits = rewrite_imports(code)
    assert new == code
    assert [e.action for e in edits] == ["manual", "manual"]
    assert "verl_omni.models.base" in edits[1].message


def test_cli_check_diff_in_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "reward.py"
    f.write_text(BEFORE)
    assert main(["--imports", "--check", str(f)]) == 1
    assert main(["--imports", "--diff", str(f)]) == 0
    out = capsys.readouterr()
    assert "+from verl_omni.algos import kl_penalty_historical as kl_penalty_image" in out.out
    assert f"{f}:4: manual: from verl.trainer.diffusion.diffusion_algos import compute_flow" in out.err
    assert main(["--imports", "-i", str(tmp_path)]) == 0
    assert f.read_text() == AFTER
    assert (tmp_path / "reward.py.bak").read_text() == BEFORE
    assert main(["--imports", "--check", str(f)]) == 0
