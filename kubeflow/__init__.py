"""Kubeflow Pipelines adapter: compiles create_pipeline(config) to KFP v2 IR (see README)."""
