"""Kubeflow Pipelines adapter: not built yet. It will compile the same create_pipeline(config)
with KubeflowV2DagRunner and launch multi-worker training as a Training Operator TFJob running
`python -m components.train_task` in each pod (components.cluster.Launcher)."""
