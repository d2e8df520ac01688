module github.com/kubeflow/pipelines/kubernetes_platform

go 1.23

require (
	github.com/kubeflow/pipelines/api v0.0.0-20250102152816-873e9dedd766
	google.golang.org/protobuf v1.36.6
)
