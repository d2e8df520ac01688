module github.com/kubeflow/pipelines/api

go 1.23

require (
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250715232539-7130f93afb79
	google.golang.org/protobuf v1.36.6
)
