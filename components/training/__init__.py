"""The distributed-training runtime: the Trainer contract (settings), the strategy factory, the
training loop, cluster launchers behind one registry (local processes, a Training Operator TFJob,
a Kubeflow Trainer v2 TrainJob), TF_CONFIG for JobSet pods, the task entry point and the
Trainer's run_fn."""
