package main

// The `argo` command: a compiled file through the API server's upload parser and run creation,
// the Argo Workflow that produces, and Argo's own validation of it. Read at kubeflow/pipelines
// fc3214d4b4d3 (tag 2.14.3) and argoproj/argo-workflows v3.6.7 (the version its go.mod
// requires); "file:line" below is there.

import (
	"fmt"
	"os"
	"strings"

	"github.com/argoproj/argo-workflows/v3/cmd/argo/lint"
	"github.com/argoproj/argo-workflows/v3/pkg/apiclient"
	"github.com/kubeflow/pipelines/api/v2alpha1/go/pipelinespec"
	"github.com/kubeflow/pipelines/backend/src/apiserver/config/proxy"
	"github.com/kubeflow/pipelines/backend/src/apiserver/model"
	"github.com/kubeflow/pipelines/backend/src/apiserver/template"
	"github.com/kubeflow/pipelines/backend/src/common/util"
	"sigs.k8s.io/yaml"
)

// argoWorkflow writes the Workflow the API server would create for a run of the compiled file
// at pipelinePath to outPath, after the checks the API server and Argo make on it.
func argoWorkflow(pipelinePath, outPath string) error {
	workflow, _, err := compileWorkflow(pipelinePath)
	if err != nil {
		return err
	}
	payload, err := yaml.Marshal(workflow.Workflow)
	if err != nil {
		return err
	}
	if err := os.WriteFile(outPath, payload, 0o644); err != nil {
		return err
	}
	return argoLint(outPath)
}

// compileWorkflow: the compiled file through the API server's upload parser and run creation,
// and the API server's validation of the Workflow that gives; and the pipeline spec as the
// upload parser read it. The run is created as `run_kubeflow.py deploy --run` creates it: with
// the file's defaultPipelineRoot as its runtime config's pipeline root (the backend reads the
// root from there, template.go:169, never from the file).
func compileWorkflow(pipelinePath string) (*util.Workflow, *pipelinespec.PipelineSpec, error) {
	// The API server sets its proxy settings at start (apiserver/main.go:413, from its
	// environment); none here, so this machine's proxy variables do not reach the Workflow.
	proxy.InitializeConfig("", "", "")
	content, err := os.ReadFile(pipelinePath)
	if err != nil {
		return nil, nil, err
	}
	// The upload parser: resource_manager.go:405 (CreatePipelineVersion) calls template.New,
	// which for a v2 file is NewV2SpecTemplate (template.go:144-154, v2_template.go:173-243):
	// schema version 2.1.0, the pipeline name's pattern, a root, the PlatformSpec document.
	// Cache on, no default workspace: the API server's defaults (apiserver/main.go flags).
	tmpl, err := template.New(content, false, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("upload parser (template.New): %w", err)
	}
	if !tmpl.IsV2() {
		return nil, nil, fmt.Errorf("upload parser: not a v2 pipeline spec")
	}
	// Run creation: resource_manager.go:537-549 (CreateRun): RunWorkflow, which runs
	// argocompiler.Compile with the file's kubernetes PlatformSpec (v2_template.go:305-364), then
	// the Workflow's validation as the API server does it (util/workflow.go:773, Lint off; the
	// Argo controller's own check, workflow/controller/operator.go:3992, uses the same options).
	spec, err := readSpec(content)
	if err != nil {
		return nil, nil, err
	}
	run := &model.Run{
		UUID: runID, DisplayName: "kfp-check", Namespace: runNamespace,
		PipelineSpec: model.PipelineSpec{
			RuntimeConfig: model.RuntimeConfig{PipelineRoot: spec.GetDefaultPipelineRoot()},
		},
	}
	execution, err := tmpl.RunWorkflow(run, template.RunWorkflowOptions{RunId: runID})
	if err != nil {
		return nil, nil, fmt.Errorf("run creation (RunWorkflow, argocompiler.Compile): %w", err)
	}
	if err := execution.Validate(false, false); err != nil {
		return nil, nil, fmt.Errorf("the API server's workflow validation: %w", err)
	}
	workflow, ok := execution.(*util.Workflow)
	if !ok {
		return nil, nil, fmt.Errorf("run creation gave a %T, not an Argo Workflow", execution)
	}
	return workflow, spec, nil
}

// argoLint is `argo lint --offline --kinds=workflows --strict` on the written file
// (cmd/argo/commands/lint.go): the file parsed strictly (unknown fields are errors), then
// validate.ValidateWorkflow with Lint on (pkg/apiclient/offline-workflow-service-client.go:74).
func argoLint(path string) error {
	ctx, client, err := apiclient.NewClientFromOpts(apiclient.Opts{Offline: true, OfflineFiles: []string{path}})
	if err != nil {
		return fmt.Errorf("argo lint: %w", err)
	}
	var printed strings.Builder
	results, err := lint.Lint(ctx, &lint.LintOptions{
		Files:            []string{path},
		Strict:           true,
		DefaultNamespace: runNamespace,
		ServiceClients:   lint.ServiceClients{WorkflowsClient: client.NewWorkflowServiceClient()},
		Printer:          &printed,
	})
	if err != nil {
		return fmt.Errorf("argo lint: %w", err)
	}
	linted := 0
	for _, result := range results.Results {
		if result.Linted {
			linted++
		}
	}
	if !results.Success || linted != 1 {
		return fmt.Errorf("argo lint (%d workflow(s) linted): %s", linted, strings.TrimSpace(printed.String()))
	}
	return nil
}
