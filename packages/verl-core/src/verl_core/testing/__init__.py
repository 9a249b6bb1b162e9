"""Test helpers other packages reuse: a tiny random LLM builder and the rollout server contract suite."""
