"""The compiled variants the Kubeflow conformance checks cover (tests/kubeflow/conftest.py
compiles each once per session): name -> the flags of `run_kubeflow.py compile` besides the
pipeline root and the images below."""

IMAGE = "registry.example.com/tfx-scaleout@sha256:" + "1" * 64
GPU_IMAGE = "registry.example.com/tfx-scaleout-gpu@sha256:" + "2" * 64
PIPELINE_ROOT = "gs://bucket/tfx"
VARIANTS = {
    "penguins": [],
    "user_csv": ["--data_root=gs://bucket/penguins", "--label=species"],
    "digits": ["--dataset=digits"],
    "multi_worker_tfjob": ["--strategy=multi_worker_mirrored", "--workers=2"],
    "multi_worker_trainjob": [
        "--strategy=multi_worker_mirrored",
        "--workers=2",
        "--launcher=trainjob",
    ],
    "parameter_server_tfjob": ["--strategy=parameter_server", "--workers=2", "--ps=1"],
    "multi_worker_local": ["--strategy=multi_worker_mirrored", "--workers=2", "--launcher=local"],
    "digits_parameter_server": ["--dataset=digits", "--strategy=parameter_server", "--ps=1"],
    "pvc": [
        "--pvc_name=tfx-data",
        "--mount_path=/mnt/data",
        "--data_root=/mnt/data/penguins",
        "--label=species",
        "--serving_model_dir=/mnt/data/serving",
        "--node_selector=pool=gpu",
    ],
}
