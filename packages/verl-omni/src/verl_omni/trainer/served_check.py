"""The served-weights check: after a weight sync every rollout server serves exactly the tensors the actor exports.

The weight version a server answers says only that an update arrived; a sync that loads nothing (a push that
reached no server, an engine hook that drops the tensors) still bumps it, and the run then trains against a frozen
sampler. So once per run, after its first sync, the trainer reads every pushed tensor back from every server
(`RolloutHttpServer.served_weights`, the server contract's read-back) and compares it with the actor's export in
the rollout's dtype (`FlowGRPOTrainer._check_served_weights`). `trainer.check_served_weights: false` skips it (it
moves the whole pushed state to the driver: the adapter with LoRA, the full model without).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["CHECK_KEY", "mismatched_tensors", "served_weights_error"]

CHECK_KEY = "trainer.check_served_weights"


def mismatched_tensors(
    expected: Mapping[str, torch.Tensor], served: Mapping[str, torch.Tensor] | BaseException
) -> list[str]:
    """Names in `expected` that `served` lacks or holds with another shape or value (all of them when the read failed).

    A served tensor is compared in its own dtype (`expected` cast to it), bit for bit.
    """
    if isinstance(served, BaseException):
        return sorted(expected)
    bad = []
    for name, want in expected.items():
        got = served.get(name)
        if got is None or got.shape != want.shape or not torch.equal(got, want.to(got.dtype)):
            bad.append(name)
    return sorted(bad)


def served_weights_error(
    expected: Mapping[str, torch.Tensor],
    served: Mapping[int, Mapping[str, torch.Tensor] | BaseException],
    addresses: list[str],
    *,
    version: int,
    kind: str,
) -> str | None:
    """The error message naming each server that does not serve `expected`, or None when every server does.

    Args:
        expected: the actor's tensors as it pushes them (names as `update_weights` takes them).
        served: server rank -> the tensors it read back under those names, or the error its read-back raised.
        addresses: the servers' addresses, rank order.
        version: the weight version the actor pushed.
        kind: `"lora"` or `"full"`.
    """
    parts = []
    for rank in sorted(served):
        bad = mismatched_tensors(expected, served[rank])
        if not bad:
            continue
        where = addresses[rank] if rank < len(addresses) else "?"
        failed = served[rank]
        why = f" (read-back failed: {type(failed).__name__}: {failed})" if isinstance(failed, BaseException) else ""
        parts.append(
            f"rollout server {rank} at {where}: {len(bad)} of {len(expected)} {kind} tensors differ from the "
            f"actor's, e.g. {bad[:3]}{why}"
        )
    if not parts:
        return None
    return (
        f"after the weight sync of version {version} the rollout does not serve the actor's weights: "
        + "; ".join(parts)
        + f". The sync did not reach the servers' engines, so the run would train against a frozen sampler. (This "
        f"check runs once per run, after the first sync; {CHECK_KEY}=false turns it off.)"
    )
