"""Kubeflow Pipelines adapter: compiles the same create_pipeline(config) with KubeflowV2DagRunner
(kubeflow/run_kubeflow.py compile), uploads and runs it (deploy), builds its images
(Dockerfile, Dockerfile.gpu, build_images.sh), and launches multi-worker training as a Training
Operator TFJob running `python -m components.train_task` in each pod (tfjob.TFJobLauncher, a
components.cluster.Launcher)."""
