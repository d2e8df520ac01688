"""Kubeflow Pipelines adapter: compiles the same create_pipeline(config) with KubeflowV2DagRunner
(kubeflow/run_kubeflow.py compile), uploads and runs it (deploy), builds its images
(Dockerfile, Dockerfile.gpu, build_images.sh), and launches multi-worker training as a Training
Operator TFJob running `python -m components.training.run_task` in each pod (tfjob.TFJobLauncher, a
components.training.cluster.Launcher).

`kubeflow` is also the namespace Kubeflow's own Python SDKs install into (the Kubeflow SDK's
`kubeflow.trainer`, `kubeflow.common`, ...; the Training Operator SDK's `kubeflow.training`), so
this package is a pkgutil-style namespace package, declared exactly as the Training Operator SDK
(kubeflow-training) declares it: every other `kubeflow/` directory on sys.path -- a pkgutil
portion, a PEP 420 portion, or the Kubeflow SDK's regular package -- joins `__path__`, and
`import kubeflow.trainer` keeps working next to `kubeflow.compile`. Define nothing else here:
whichever portion's `__init__.py` is found first is the only one that runs.
"""

__path__ = __import__("pkgutil").extend_path(__path__, __name__)
