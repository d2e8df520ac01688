"""The distributed-training runtime: the Trainer contract (settings), the strategy factory, the
training loop, cluster launchers (local processes, Kubernetes TFJob) behind one registry, the
task entry point and the Trainer's run_fn."""
