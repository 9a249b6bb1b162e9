"""FlowGRPO training: the algorithm (`algos`) and, later, the Ray trainer."""
