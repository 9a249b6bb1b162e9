"""Scaling out: `trainer.nnodes=2` on a simulated two-node Ray cluster places a rank on each node and trains."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def two_node_cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    # one CPU per node: a node's placement group (one bundle) cannot share a node with the other one
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_two_nodes_one_rank_each_finish_a_step(two_node_cluster, trainer_run, tmp_path):
    nodes = []

    def record(components):
        nodes.extend(node["node_id"] for node in components.actor.nodes)

    run = trainer_run(
        tmp_path,
        ["trainer.nnodes=2", "trainer.n_gpus_per_node=1", "trainer.total_training_steps=1",
         "trainer.val_before_train=false", "actor_rollout_ref.rollout.host=0.0.0.0"],
        wrap=record,
    )  # fmt: skip
    assert run.error is None, run.error
    assert len(nodes) == 2 and len(set(nodes)) == 2
    assert run.history[0]["training/global_step"] == 1.0
