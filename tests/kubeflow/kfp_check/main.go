// Command kfp_check runs Kubeflow Pipelines' own backend code on a compiled pipeline file, the
// code a KFP API server runs when the file is uploaded and a run is created (tests only; built
// by tests/kubeflow/kfp_backend.py, pinned by go.mod):
//
//	kfp_check workflow PIPELINE.yaml WORKFLOW.json [PIPELINE.yaml WORKFLOW.json ...]
//
// For each pair: the upload parser (template.NewV2SpecTemplate), the run's compilation
// (V2Spec.RunWorkflow, which calls argocompiler.Compile with the file's Kubernetes PlatformSpec),
// then Argo's workflow validation with lint on (util.Workflow.Validate, as KFP's compiler tests
// do); the Workflow is written as JSON. The first failure exits 1 naming the file and the step.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/kubeflow/pipelines/backend/src/apiserver/model"
	"github.com/kubeflow/pipelines/backend/src/apiserver/template"
	"github.com/kubeflow/pipelines/backend/src/common/util"
)

// The run every compiled file is checked with: the API server's CreateRun fills these from the
// request (backend/src/apiserver/resource/resource_manager.go CreateRun at the pinned commit).
const (
	runID        = "00000000-0000-4000-8000-000000000001"
	runNamespace = "kubeflow-user-example-com"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: kfp_check workflow PIPELINE.yaml WORKFLOW.json [...] | kfp_check executor-input ...")
	}
	var err error
	switch os.Args[1] {
	case "workflow":
		err = workflows(os.Args[2:])
	case "executor-input":
		err = executorInput(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (workflow, executor-input)", os.Args[1])
	}
	if err != nil {
		fail(err.Error())
	}
}

func fail(message string) {
	fmt.Fprintln(os.Stderr, "kfp_check:", message)
	os.Exit(1)
}

func workflows(args []string) error {
	if len(args) == 0 || len(args)%2 != 0 {
		return fmt.Errorf("workflow needs PIPELINE.yaml WORKFLOW.json pairs, got %d arguments", len(args))
	}
	for i := 0; i < len(args); i += 2 {
		if err := workflow(args[i], args[i+1]); err != nil {
			return fmt.Errorf("%s: %w", args[i], err)
		}
	}
	return nil
}

func workflow(pipelinePath, outPath string) error {
	content, err := os.ReadFile(pipelinePath)
	if err != nil {
		return err
	}
	spec, err := template.NewV2SpecTemplate(content, false, nil)
	if err != nil {
		return fmt.Errorf("upload parser (template.NewV2SpecTemplate): %w", err)
	}
	run := &model.Run{
		UUID:        runID,
		DisplayName: spec.V2PipelineName() + "-check",
		Namespace:   runNamespace,
	}
	execution, err := spec.RunWorkflow(run, template.RunWorkflowOptions{RunId: runID})
	if err != nil {
		return fmt.Errorf("run compilation (V2Spec.RunWorkflow -> argocompiler.Compile): %w", err)
	}
	wf, ok := execution.(*util.Workflow)
	if !ok {
		return fmt.Errorf("the compiled run is a %T, not an Argo Workflow", execution)
	}
	if err := wf.Validate(true, false); err != nil {
		return fmt.Errorf("Argo validation (lint on): %w", err)
	}
	payload, err := json.MarshalIndent(wf.Workflow, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(outPath, payload, 0o644)
}
