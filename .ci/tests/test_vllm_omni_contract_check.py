"""`tools/vllm-omni-contract/contract_check.py` on small wheels written here.

The real releases run in `nox -s vllm_omni-<version>`.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import textwrap
import zipfile

import pytest

from verl_omni.rollout.vllm_omni import contract
from verl_omni.rollout.vllm_omni.contract import Expect, Release

ROOT = pathlib.Path(__file__).parents[2]
DOCS = ROOT / "docs" / "omni" / "vllm_omni.md"
_TOOL = ROOT / "tools" / "vllm-omni-contract"
_SPEC = importlib.util.spec_from_file_location("vllm_omni_contract_check", _TOOL / "contract_check.py")
contract_check = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = contract_check  # dataclasses look their module up by name
_SPEC.loader.exec_module(contract_check)
check_release, main = contract_check.check_release, contract_check.main
ZipSource = contract_check.load_wheel_sources().ZipSource

MANAGER_V1 = """
    class DiffusionLoRAManager:
        def __init__(self, pipeline, device, dtype, max_cached_adapters=1):
            self.pipeline = pipeline
            self._expected_lora_modules = set()

        def _load_adapter(self, lora_request):
            path = get_adapter_absolute_path(lora_request.lora_path)
            return LoRAModel.from_local_checkpoint(path, expected_lora_modules=1, dtype=2), None

        def add_adapter(self, lora_request):
            lora_model, peft_helper = self._load_adapter(lora_request)
            return True
"""
MANAGER_V2 = MANAGER_V1.replace(
    "            path = get_adapter_absolute_path",
    """            loader = getattr(self.pipeline, "_load_diffusion_lora_adapter", None)
            if callable(loader):
                loaded = loader(lora_request=lora_request, lora_path="/x", dtype=None)
            path = get_adapter_absolute_path""",
)
FILES = {
    "vllm_omni/__init__.py": "",
    "vllm_omni/entrypoints/__init__.py": """
        def __getattr__(name):
            if name == "AsyncOmni":
                from vllm_omni.entrypoints.async_omni import AsyncOmni
                return AsyncOmni
            raise AttributeError(name)
    """,
    "vllm_omni/entrypoints/base.py": """
        class Base:
            def shutdown(self, timeout=None): ...
    """,
    "vllm_omni/entrypoints/async_omni.py": """
        from .base import Base
        from vllm.engine.protocol import EngineClient
        class AsyncOmni(Base, EngineClient):
            async def abort(self, request_id, *, timeout=None): ...
            async def collective_rpc(self, method, timeout=None, args=(), kwargs=None): ...
    """,
    "vllm_omni/lora/request.py": "from vllm.lora.request import LoRARequest\n",
    "vllm_omni/diffusion/data.py": """
        from dataclasses import dataclass
        @dataclass
        class DiffusionOutput:
            output: object = None
            custom_output: dict = None
    """,
}


def _wheel(tmp_path, version: str, manager: str, **overrides: str) -> ZipSource:
    path = tmp_path / f"vllm_omni-{version}-py3-none-any.whl"
    files = {**FILES, "vllm_omni/diffusion/lora/manager.py": manager, **overrides}
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, textwrap.dedent(text))
        meta = f"Metadata-Version: 2.1\nName: vllm-omni\nVersion: {version}\nRequires-Python: >=3.10,<3.14\n"
        z.writestr(f"vllm_omni-{version}.dist-info/METADATA", meta + "Requires-Dist: diffusers==0.40.0\n")
    return ZipSource(path)


def _release(version: str) -> Release:
    return Release(version, vllm=version, torch="2.13.0", diffusers="==0.40.0", python=">=3.10,<3.14")


M = "vllm_omni.diffusion.lora.manager"
# fmt: off
ROWS = (
    Expect("lazy-reexport", "vllm_omni", "symbol", "vllm_omni.entrypoints", "AsyncOmni"),
    Expect("external-reexport", "vllm_omni", "symbol", "vllm_omni.lora.request", "LoRARequest"),
    Expect("inherited-method", "vllm_omni", "symbol", "vllm_omni.entrypoints.async_omni", "AsyncOmni.shutdown"),
    Expect("rpc", "vllm_omni", "signature", "vllm_omni.entrypoints.async_omni", "AsyncOmni.collective_rpc",
           ("method", "timeout", "kwargs"), positional=("method",)),
    Expect("abort-timeout", "vllm_omni", "signature", "vllm_omni.entrypoints.async_omni", "AsyncOmni.abort",
           ("timeout",), since="0.30"),
    Expect("state", "vllm_omni", "assigns", M, "DiffusionLoRAManager.__init__", ("pipeline", "_expected_lora_modules")),
    Expect("unpacks", "vllm_omni", "unpacks", M, "DiffusionLoRAManager.add_adapter", ("a", "b"),
           callee="_load_adapter"),
    Expect("file-path", "vllm_omni", "calls", M, "DiffusionLoRAManager._load_adapter", ("expected_lora_modules",),
           callee="from_local_checkpoint"),
    Expect("hook", "vllm_omni", "calls", M, "DiffusionLoRAManager._load_adapter", ("lora_request", "lora_path"),
           callee="_load_diffusion_lora_adapter", since="0.28"),
    Expect("custom-output", "vllm_omni", "fields", "vllm_omni.diffusion.data", "DiffusionOutput", ("custom_output",),
           before="0.26"),
    Expect("no-custom-output", "vllm_omni", "no_fields", "vllm_omni.diffusion.data", "DiffusionOutput",
           ("custom_output",), since="0.26"),
)
# fmt: on


def test_checker_passes_rows_that_hold(tmp_path):
    assert check_release(_release("0.24.0"), _wheel(tmp_path, "0.24.0", MANAGER_V1), None, ROWS) == []


def test_checker_names_row_symbol_and_version(tmp_path):
    failures = check_release(_release("0.30.0"), _wheel(tmp_path, "0.30.0", MANAGER_V1), None, ROWS)
    text = sorted(str(f) for f in failures)
    assert len(text) == 2, text  # the hook call is missing, and 0.26+ must not declare custom_output
    assert "vllm-omni 0.30.0: `vllm_omni.diffusion.data.DiffusionOutput` declares ['custom_output']" in text[0]
    assert "[contract row 'no-custom-output']" in text[0]
    assert "does not call `_load_diffusion_lora_adapter` [contract row 'hook']" in text[1]


def test_checker_follows_getattr_aliases(tmp_path):
    data = {"vllm_omni/diffusion/data.py": "from dataclasses import dataclass\n@dataclass\nclass DiffusionOutput:\n"
            "    output: object = None\n"}  # fmt: skip
    assert check_release(_release("0.30.0"), _wheel(tmp_path, "0.30.0", MANAGER_V2, **data), None, ROWS) == []


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (Expect("x", "vllm_omni", "signature", "vllm_omni.entrypoints.async_omni", "AsyncOmni.collective_rpc",
                ("method",), positional=("timeout",)), "takes ['method'] first, expected ['timeout']"),
        (Expect("x", "vllm_omni", "signature", "vllm_omni.entrypoints.async_omni", "AsyncOmni.abort", ("ids",)),
         "takes no parameter(s) ['ids'] by keyword"),
        (Expect("x", "vllm_omni", "symbol", "vllm_omni.entrypoints.async_omni", "AsyncOmni.generate"),
         "has no method `generate`"),
        (Expect("x", "vllm_omni", "symbol", "vllm_omni.nowhere", "Thing"), "module `vllm_omni.nowhere` does not exist"),
        (Expect("x", "vllm_omni", "no_symbol", "vllm_omni.entrypoints.async_omni", "AsyncOmni.abort"),
         "expects it to be absent"),
        (Expect("x", "vllm_omni", "unpacks", M, "DiffusionLoRAManager.add_adapter", ("a", "b", "c"),
                callee="_load_adapter"), "into 3 values"),
    ],
)  # fmt: skip
def test_checker_failure_messages(tmp_path, row, message):
    failures = check_release(_release("0.24.0"), _wheel(tmp_path, "0.24.0", MANAGER_V1), None, (row,))
    assert len(failures) == 1 and message in str(failures[0]), failures


def test_checker_reads_metadata_pins(tmp_path):
    release = Release("0.24.0", vllm="0.24.0", torch="2.11.0", diffusers="==0.38.0", python=">=3.10,<3.14")
    failures = check_release(release, _wheel(tmp_path, "0.24.0", MANAGER_V1), None, ())
    assert [f.id for f in failures] == ["release-diffusers"] and "==0.40.0" in failures[0].message


def test_checker_cli_prints_the_table(capsys):
    assert main(["--table"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| vllm-omni | vllm |") and "| 0.30.0 | 0.30.0 |" in out


def test_docs_support_table_is_generated_from_the_contract():
    assert contract_check.support_table(contract) in DOCS.read_text(), (
        "docs/omni/vllm_omni.md is out of date: paste the output of "
        "`python tools/vllm-omni-contract/contract_check.py --table`"
    )
