"""Rollout errors survive pickling (Ray carries an actor rank's error to the driver): type, message, field, rank."""

from __future__ import annotations

import pickle

import pytest

from verl_core.rollout import errors


@pytest.mark.parametrize("name", errors.__all__)
def test_every_rollout_error_pickles_with_its_fields(name):
    cls = getattr(errors, name)
    error = cls("server 1 is gone", rank=1) if cls is errors.ServerDeadError else cls("bad bucket", field="w")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls and str(back) == str(error) and back.message == error.message
    assert back.field == error.field and getattr(back, "rank", None) == getattr(error, "rank", None)
