"""`verl_core.testing` imports without pytest (it ships in the runtime dist); only the suite class needs it."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_testing_helpers_import_and_run_without_pytest():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["pytest"] = None  # `import pytest` raises ModuleNotFoundError from here on
        import asyncio, torch
        import verl_core.testing, verl_core.testing.tiny_llm
        from verl_core.testing.server_contract import ContractBackend, canonical, hung_variant, run

        async def two():
            return 2

        assert run(two()) == 2
        assert canonical({"x": torch.ones(2)}) == canonical({"x": torch.ones(2)})
        try:
            from verl_core.testing.server_contract import ServerContractSuite
        except ModuleNotFoundError as e:
            print("suite:", e)
        print("pytest imported:", sys.modules["pytest"] is not None)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'suite: ServerContractSuite needs pytest: install the test extra (`pip install "verl-core[test]"`)' in (
        proc.stdout
    )
    assert "pytest imported: False" in proc.stdout


def test_the_suite_is_served_lazily_by_the_helpers_module():
    from verl_core.testing import contract_suite, server_contract

    assert server_contract.ServerContractSuite is contract_suite.ServerContractSuite
