"""The tests' own virtual environments (kfp.local's kfp release): kubeflow/local_cluster/venvs.py,
which the local cluster's KFP build shares for its protoc."""

from kubeflow.local_cluster.venvs import ROOT, ensure, python_of

__all__ = ["ROOT", "ensure", "python_of"]
