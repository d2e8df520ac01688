"""A single-node Kubernetes cluster on this machine, built from source, for trying the
Kubernetes and Kubeflow paths for real: `python -m kubeflow.local_cluster up | status | down`.

  builds.py      Kubernetes, CoreDNS, the operators and the sandbox program, built and cached
  images.py      FROM-scratch images with podman, loaded into the node's containerd
  pki.py         the certificates, keys and static tokens of one `up`
  node.py        layout, addresses and the node's daemons (etcd .. kube-proxy)
  supervisor.py  the process that holds the node inside its namespaces
  host.py        the host changes (network namespace, veth, cgroups, mounts) and their undoing
  addons.py      CoreDNS, the shared volume, the Training Operator, JobSet and Kubeflow Trainer
  cluster.py     up, status and down as named steps
"""
