"""FlowGRPO training on Ray (the trainer); the algorithm's tensor math lives in `verl_omni.algos`."""
