// Command kfp_check runs Kubeflow Pipelines' backend code on a compiled file (tests only; built
// by tests/kubeflow/kfp_backend.py, pinned by go.mod):
//
//	kfp_check argo PIPELINE.yaml WORKFLOW.yaml
//
// The API server's upload parser, run creation (argocompiler.Compile), the API server's and
// Argo's validation of the Workflow, which is written to WORKFLOW.yaml (argo.go).
//
//	kfp_check run PIPELINE.yaml MLMD_HOST:PORT OUT_DIR
//
// Every task of that Workflow's root DAG, in the order Argo would start them, through the
// backend's own container driver (driver.Container) with the arguments the Workflow gives it,
// against a real ML Metadata store reached over gRPC (the tests serve one); after each, its
// outputs published as the launcher publishes them when the user container exits 0. Written to
// OUT_DIR per task: <task>.executor_input.json (the ExecutorInput protojson-marshalled as the
// launcher substitutes it for {{$}}) and <task>.pod_spec_patch.json (the pod spec patch the
// driver hands Argo: image, command, resources, volumes, node selector, tolerations).
//
// Read at kubeflow/pipelines fc3214d4b4d3 (tag 2.14.3, the commit go.mod pins); "file:line"
// below is there. Not run: the root DAG driver (driver.RootDAG reads the kfp-launcher
// ConfigMap from a Kubernetes API server; what it records is recorded here as it does,
// rootDAG below), the launcher binary and the user containers (no executor runs: the outputs
// published are the URIs the driver provisioned, and output parameters are made up, see
// outputParameters), the cache (off, as with the API server's --cacheEnabled=false).
package main

import (
	"fmt"
	"os"
)

const (
	runID        = "00000000-0000-4000-8000-000000000001"
	runNamespace = "kubeflow-user-example-com"
	// The compiled Workflow's default for the drivers' --publish_logs (argocompiler/container.go:
	// 215 passes PUBLISH_LOGS only when the API server sets it; cmd/driver/main.go:87 defaults to "true").
	publishLogs     = "true"
	containerDriver = "system-container-driver"
)

func main() {
	var err error
	switch {
	case len(os.Args) == 5 && os.Args[1] == "run":
		err = runTasks(os.Args[2], os.Args[3], os.Args[4])
	case len(os.Args) == 4 && os.Args[1] == "argo":
		err = argoWorkflow(os.Args[2], os.Args[3])
	default:
		fail("usage: kfp_check run PIPELINE.yaml MLMD_HOST:PORT OUT_DIR\n" +
			"       kfp_check argo PIPELINE.yaml WORKFLOW.yaml")
	}
	if err != nil {
		fail(err.Error())
	}
}

func fail(message string) {
	fmt.Fprintln(os.Stderr, "kfp_check:", message)
	os.Exit(1)
}
