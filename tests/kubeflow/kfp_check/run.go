package main

// The `run` command: every container task of the compiled Workflow through driver.Container.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	wfapi "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	"github.com/kubeflow/pipelines/api/v2alpha1/go/pipelinespec"
	"github.com/kubeflow/pipelines/backend/src/common/util"
	"github.com/kubeflow/pipelines/backend/src/v2/config"
	"github.com/kubeflow/pipelines/backend/src/v2/driver"
	"github.com/kubeflow/pipelines/backend/src/v2/metadata"
	"github.com/kubeflow/pipelines/backend/src/v2/objectstore"
	"github.com/kubeflow/pipelines/kubernetes_platform/go/kubernetesplatform"
	pb "github.com/kubeflow/pipelines/third_party/ml-metadata/go/ml_metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	goyaml "gopkg.in/yaml.v3"
)

var (
	workflowParameter = regexp.MustCompile(`^\{\{workflow\.parameters\.([^}]+)\}\}$`)
	succeeded         = regexp.MustCompile(`([A-Za-z0-9_.-]+)\.Succeeded`)
)

type run struct {
	ctx      context.Context
	mlmd     *metadata.Client
	pipeline *metadata.Pipeline
	bucket   *objectstore.Config
	dag      *metadata.DAG
}

// driverCall: one container driver step of the Workflow's root DAG, its arguments resolved.
type driverCall struct {
	task      string            // the task's name (the driver's --task_name)
	arguments map[string]string // the driver template's input parameters
	after     []string          // the tasks whose executor step it depends on
}

func runTasks(pipelinePath, address, outDir string) error {
	workflow, spec, err := compileWorkflow(pipelinePath)
	if err != nil {
		return err
	}
	runtimeConfig, calls, err := rootCalls(workflow)
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("MLMD address %q: %w", address, err)
	}
	client, err := metadata.NewClient(host, port)
	if err != nil {
		return err
	}
	r := &run{ctx: context.Background(), mlmd: client}
	name := spec.GetPipelineInfo().GetName()
	if err := r.rootDAG(name, runtimeConfig); err != nil {
		return fmt.Errorf("root DAG: %w", err)
	}
	ordered, err := startOrder(calls)
	if err != nil {
		return err
	}
	for _, call := range ordered {
		if err := r.container(name, call, outDir); err != nil {
			return fmt.Errorf("%s: %w", call.task, err)
		}
	}
	return nil
}

// rootCalls reads, from the Workflow, the runtime config the root DAG driver is given
// (argocompiler/dag.go: the entrypoint's root-driver task) and every container driver step of
// the root DAG with its arguments, {{workflow.parameters.*}} substituted as Argo substitutes them.
func rootCalls(workflow *util.Workflow) (*pipelinespec.PipelineJob_RuntimeConfig, []driverCall, error) {
	parameters := map[string]string{}
	for _, parameter := range workflow.Spec.Arguments.Parameters {
		if parameter.Value != nil {
			parameters[parameter.Name] = parameter.Value.String()
		}
	}
	templates := map[string]wfapi.Template{}
	for _, template := range workflow.Spec.Templates {
		templates[template.Name] = template
	}
	arguments := func(task wfapi.DAGTask) map[string]string {
		values := map[string]string{}
		for _, parameter := range task.Arguments.Parameters {
			if parameter.Value == nil {
				continue
			}
			value := parameter.Value.String()
			if found := workflowParameter.FindStringSubmatch(value); found != nil {
				value = parameters[found[1]]
			}
			values[parameter.Name] = value
		}
		return values
	}
	var runtimeConfig *pipelinespec.PipelineJob_RuntimeConfig
	entrypoint, ok := templates[workflow.Spec.Entrypoint]
	if !ok || entrypoint.DAG == nil {
		return nil, nil, fmt.Errorf("the Workflow has no entrypoint DAG %q", workflow.Spec.Entrypoint)
	}
	for _, task := range entrypoint.DAG.Tasks {
		if value, ok := arguments(task)["runtime-config"]; ok {
			runtimeConfig = &pipelinespec.PipelineJob_RuntimeConfig{}
			// cmd/driver/main.go:163-169.
			if err := util.UnmarshalString(value, runtimeConfig); err != nil {
				return nil, nil, fmt.Errorf("root driver's runtime config: %w", err)
			}
		}
	}
	if runtimeConfig == nil {
		return nil, nil, fmt.Errorf("the Workflow's entrypoint has no root driver with a runtime config")
	}
	root, ok := templates["root"]
	if !ok || root.DAG == nil {
		return nil, nil, fmt.Errorf("the Workflow has no root DAG template")
	}
	var calls []driverCall
	for _, task := range root.DAG.Tasks {
		if task.Template != containerDriver {
			continue
		}
		values := arguments(task)
		call := driverCall{task: values["task-name"], arguments: values}
		for _, found := range succeeded.FindAllStringSubmatch(task.Depends, -1) {
			call.after = append(call.after, found[1])
		}
		calls = append(calls, call)
	}
	if len(calls) == 0 {
		return nil, nil, fmt.Errorf("the root DAG has no %s steps", containerDriver)
	}
	return runtimeConfig, calls, nil
}

// startOrder: the calls in an order Argo can start them (each after the tasks it depends on),
// ties by name.
func startOrder(calls []driverCall) ([]driverCall, error) {
	done := map[string]bool{}
	var ordered []driverCall
	for len(ordered) < len(calls) {
		var ready []driverCall
		for _, call := range calls {
			if done[call.task] {
				continue
			}
			waiting := false
			for _, upstream := range call.after {
				waiting = waiting || !done[upstream]
			}
			if !waiting {
				ready = append(ready, call)
			}
		}
		if len(ready) == 0 {
			return nil, fmt.Errorf("the root DAG's dependencies have a cycle or a missing task")
		}
		sort.Slice(ready, func(i, j int) bool { return ready[i].task < ready[j].task })
		for _, call := range ready {
			done[call.task] = true
		}
		ordered = append(ordered, ready...)
	}
	return ordered, nil
}

// rootDAG records what driver.RootDAG records (driver/root_dag.go:92-136): the pipeline root
// from the runtime config, else the kfp-launcher ConfigMap's default (none here: a zero
// config.Config, so minio://mlpipeline/v2/artifacts, config/env.go:37); GetPipeline with the
// root's session info; the DAG execution "run/<run id>" with the runtime config's parameters.
func (r *run) rootDAG(name string, runtimeConfig *pipelinespec.PipelineJob_RuntimeConfig) error {
	root := runtimeConfig.GetGcsOutputDirectory()
	if root == "" {
		root = (&config.Config{}).DefaultPipelineRoot()
	}
	session, err := (&config.Config{}).GetStoreSessionInfo(root)
	if err != nil {
		return err
	}
	sessionJSON, err := json.Marshal(session)
	if err != nil {
		return err
	}
	if r.bucket, err = objectstore.ParseBucketConfig(root, &session); err != nil {
		return err
	}
	r.pipeline, err = r.mlmd.GetPipeline(r.ctx, name, runID, runNamespace, "run-resource", root, string(sessionJSON))
	if err != nil {
		return err
	}
	ecfg, err := metadata.GenerateExecutionConfig(&pipelinespec.ExecutorInput{
		Inputs: &pipelinespec.ExecutorInput_Inputs{ParameterValues: runtimeConfig.GetParameterValues()},
	})
	if err != nil {
		return err
	}
	ecfg.ExecutionType = metadata.DagExecutionTypeName
	ecfg.Name = "run/" + runID
	execution, err := r.mlmd.CreateExecution(r.ctx, r.pipeline, ecfg)
	if err != nil {
		return err
	}
	r.dag, err = r.mlmd.GetDAG(r.ctx, execution.GetID())
	return err
}

// container: the container driver's main (cmd/driver/main.go:150-214) on the step's arguments,
// driver.Container itself, what the driver writes out, then the launcher's publishing.
func (r *run) container(pipelineName string, call driverCall, outDir string) error {
	component := &pipelinespec.ComponentSpec{}
	if err := util.UnmarshalString(call.arguments["component"], component); err != nil {
		return fmt.Errorf("component spec: %w", err)
	}
	task := &pipelinespec.PipelineTaskSpec{}
	if err := util.UnmarshalString(call.arguments["task"], task); err != nil {
		return fmt.Errorf("task spec: %w", err)
	}
	container := &pipelinespec.PipelineDeploymentConfig_PipelineContainerSpec{}
	if err := util.UnmarshalString(call.arguments["container"], container); err != nil {
		return fmt.Errorf("container spec: %w", err)
	}
	var kubernetesConfig *kubernetesplatform.KubernetesExecutorConfig
	if value := call.arguments["kubernetes-config"]; value != "" { // main.go:229-238
		kubernetesConfig = &kubernetesplatform.KubernetesExecutorConfig{}
		if err := util.UnmarshalString(value, kubernetesConfig); err != nil {
			return fmt.Errorf("kubernetes config: %w", err)
		}
	}
	opts := driver.Options{
		PipelineName:             pipelineName,
		RunID:                    runID,
		RunName:                  "kfp-check-workflow",
		RunDisplayName:           "kfp-check",
		Namespace:                runNamespace,
		Component:                component,
		Task:                     task,
		DAGExecutionID:           r.dag.Execution.GetID(),
		IterationIndex:           -1,
		PublishLogs:              publishLogs,
		CacheDisabled:            true,
		DriverType:               "CONTAINER",
		TaskName:                 call.task,
		Container:                container,
		KubernetesExecutorConfig: kubernetesConfig,
	}
	// No cache client: with the cache off driver.Container never calls it (container.go:132).
	execution, err := driver.Container(r.ctx, opts, r.mlmd, nil)
	if err != nil {
		return err
	}
	payload, err := protojson.Marshal(execution.ExecutorInput) // launcher_v2.go:719
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(outDir, call.task+".executor_input.json"), payload, 0o644); err != nil {
		return err
	}
	if execution.PodSpecPatch == "" {
		return fmt.Errorf("the driver gave no pod spec patch (cached or not triggered)")
	}
	if err := os.WriteFile(filepath.Join(outDir, call.task+".pod_spec_patch.json"), []byte(execution.PodSpecPatch), 0o644); err != nil {
		return err
	}
	created, err := r.mlmd.GetExecution(r.ctx, execution.ID)
	if err != nil {
		return err
	}
	return r.publish(created, component, execution.ExecutorInput)
}

// publish: the launcher after the user container exits 0 (component/launcher_v2.go:519-570
// uploadOutputArtifacts: RecordArtifact per output with getArtifactSchema's schema;
// launcher_v2.go:325 PublishExecution COMPLETE with the output parameters). No executor ran, so
// there is no output metadata file to merge (launcher_v2.go:532), and see outputParameters.
func (r *run) publish(execution *metadata.Execution, component *pipelinespec.ComponentSpec, input *pipelinespec.ExecutorInput) error {
	var recorded []*metadata.OutputArtifact
	for name, list := range input.GetOutputs().GetArtifacts() {
		for _, artifact := range list.GetArtifacts() {
			schema, err := artifactSchema(artifact.GetType())
			if err != nil {
				return fmt.Errorf("output %q: %w", name, err)
			}
			output, err := r.mlmd.RecordArtifact(r.ctx, name, schema, artifact, pb.Artifact_LIVE, r.bucket)
			if err != nil {
				return fmt.Errorf("output %q: %w", name, err)
			}
			recorded = append(recorded, output)
		}
	}
	return r.mlmd.PublishExecution(r.ctx, execution, outputParameters(component, input), recorded, pb.Execution_COMPLETE)
}

// outputParameters stands in for what an executor would write to its output parameter files:
// the task's own input of the same name where it has one (the ExampleGen span task passes its
// input_config on), else the type's zero value.
func outputParameters(component *pipelinespec.ComponentSpec, input *pipelinespec.ExecutorInput) map[string]*structpb.Value {
	values := map[string]*structpb.Value{}
	for name, definition := range component.GetOutputDefinitions().GetParameters() {
		if value, ok := input.GetInputs().GetParameterValues()[name]; ok {
			values[name] = value
			continue
		}
		switch definition.GetParameterType() {
		case pipelinespec.ParameterType_NUMBER_INTEGER, pipelinespec.ParameterType_NUMBER_DOUBLE:
			values[name] = structpb.NewNumberValue(0)
		case pipelinespec.ParameterType_BOOLEAN:
			values[name] = structpb.NewBoolValue(false)
		case pipelinespec.ParameterType_LIST:
			values[name] = structpb.NewListValue(&structpb.ListValue{})
		case pipelinespec.ParameterType_STRUCT:
			values[name] = structpb.NewStructValue(&structpb.Struct{})
		default:
			values[name] = structpb.NewStringValue("")
		}
	}
	return values
}

// artifactSchema is the launcher's getArtifactSchema (launcher_v2.go:826-837, unexported).
func artifactSchema(schema *pipelinespec.ArtifactTypeSchema) (string, error) {
	switch kind := schema.GetKind().(type) {
	case *pipelinespec.ArtifactTypeSchema_InstanceSchema:
		return kind.InstanceSchema, nil
	case *pipelinespec.ArtifactTypeSchema_SchemaTitle:
		return "title: " + kind.SchemaTitle, nil
	default:
		return "", fmt.Errorf("artifact type %v is not supported by the launcher", schema)
	}
}

// readSpec: the pipeline document of a compiled file, parsed as the API server's upload parser
// parses it (apiserver/template/v2_template.go:173-216: yaml.v3 documents, the one with a
// pipelineInfo to JSON, protojson.Unmarshal into PipelineSpec).
func readSpec(content []byte) (*pipelinespec.PipelineSpec, error) {
	decoder := goyaml.NewDecoder(bytes.NewReader(content))
	for {
		var document map[string]interface{}
		if err := decoder.Decode(&document); errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("no pipeline spec in the file")
		} else if err != nil {
			return nil, err
		}
		if _, ok := document["pipelineInfo"]; !ok {
			continue
		}
		payload, err := json.Marshal(document)
		if err != nil {
			return nil, err
		}
		spec := &pipelinespec.PipelineSpec{}
		if err := protojson.Unmarshal(payload, spec); err != nil {
			return nil, fmt.Errorf("invalid v2 pipeline spec: %w", err)
		}
		return spec, nil
	}
}
