// Command kfp_check hands one task's output to the next as Kubeflow Pipelines' backend does,
// with the backend's own code (tests only; built by tests/kubeflow/kfp_backend.py, pinned by
// go.mod), against a real ML Metadata store reached over gRPC (the tests serve one):
//
//	kfp_check hand-off PIPELINE.yaml MLMD_HOST:PORT OUT_DIR PRODUCER CONSUMER
//
// The run's pipeline and run contexts and root DAG execution, recorded as the root DAG driver
// records them; PRODUCER's execution created as its driver creates it and its outputs published
// as its launcher publishes them after the user container exits 0; then CONSUMER's input
// artifacts resolved from MLMD as its driver resolves them (GetOutputArtifactsByExecutionId,
// then OutputArtifact.ToRuntimeArtifact). Written to OUT_DIR: <task>.executor_input.json, the
// ExecutorInput protojson-marshalled as the launcher substitutes it for {{$}}.
//
// Read at kubeflow/pipelines fc3214d4b4d3 (tag 2.14.3, the commit go.mod pins); "file:line"
// below is there. The driver package itself (driver.Container) does not build against the api
// and kubernetes_platform versions the module proxy serves (see go.mod), so its two unexported
// steps used here, provisionOutputs and the constant-parameter case of resolveInputs, are
// followed line by line, cited where they are.
package main

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

	"github.com/kubeflow/pipelines/api/v2alpha1/go/pipelinespec"
	"github.com/kubeflow/pipelines/backend/src/v2/config"
	"github.com/kubeflow/pipelines/backend/src/v2/metadata"
	"github.com/kubeflow/pipelines/backend/src/v2/objectstore"
	pb "github.com/kubeflow/pipelines/third_party/ml-metadata/go/ml_metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	goyaml "gopkg.in/yaml.v3"
)

const (
	runID        = "00000000-0000-4000-8000-000000000001"
	runNamespace = "kubeflow-user-example-com"
	// backend/src/v2/component/launcher_v2.go:437 OutputMetadataFilepath.
	outputMetadataFile = "/tmp/kfp_outputs/output_metadata.json"
	// The compiled Workflow's default for the drivers' --publish_logs (argocompiler/container.go:
	// 215 passes PUBLISH_LOGS only when the API server sets it; cmd/driver/main.go:87 defaults to "true").
	publishLogs = "true"
	// The salt the driver puts in each output URI is uuid.NewString() (driver/container.go:117);
	// a fixed one keeps the files comparable between runs.
	uriSalt = "00000000-0000-4000-8000-00000000a001"
)

func main() {
	var err error
	switch {
	case len(os.Args) == 7 && os.Args[1] == "hand-off":
		err = handOff(os.Args[2], os.Args[3], os.Args[4], os.Args[5], os.Args[6])
	case len(os.Args) == 4 && os.Args[1] == "argo":
		err = argoWorkflow(os.Args[2], os.Args[3])
	default:
		fail("usage: kfp_check hand-off PIPELINE.yaml MLMD_HOST:PORT OUT_DIR PRODUCER CONSUMER\n" +
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

type run struct {
	ctx      context.Context
	spec     *pipelinespec.PipelineSpec
	mlmd     *metadata.Client
	pipeline *metadata.Pipeline
	bucket   *objectstore.Config
	root     string
	dag      *metadata.DAG
}

func handOff(pipelinePath, address, outDir, producer, consumer string) error {
	spec, err := readSpec(pipelinePath)
	if err != nil {
		return fmt.Errorf("%s: %w", pipelinePath, err)
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("MLMD address %q: %w", address, err)
	}
	client, err := metadata.NewClient(host, port)
	if err != nil {
		return err
	}
	r := &run{ctx: context.Background(), spec: spec, mlmd: client, root: spec.GetDefaultPipelineRoot()}
	if err := r.rootDAG(); err != nil {
		return fmt.Errorf("root DAG: %w", err)
	}
	produced, err := r.container(producer, nil, false)
	if err != nil {
		return fmt.Errorf("%s: %w", producer, err)
	}
	if err := r.publish(produced); err != nil {
		return fmt.Errorf("%s: publishing its outputs: %w", producer, err)
	}
	artifacts, err := r.resolveArtifacts(consumer)
	if err != nil {
		return fmt.Errorf("%s: resolving its inputs: %w", consumer, err)
	}
	consumed, err := r.container(consumer, artifacts, true)
	if err != nil {
		return fmt.Errorf("%s: %w", consumer, err)
	}
	for task, execution := range map[string]*task{producer: produced, consumer: consumed} {
		payload, err := protojson.Marshal(execution.input) // launcher_v2.go:719
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(outDir, task+".executor_input.json"), payload, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// readSpec: the pipeline document of a compiled file, parsed as the API server's upload parser
// parses it (apiserver/template/v2_template.go:173-216: yaml.v3 documents, the one with a
// pipelineInfo to JSON, protojson.Unmarshal into PipelineSpec).
func readSpec(path string) (*pipelinespec.PipelineSpec, error) {
	content, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
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

// rootDAG records what driver.RootDAG records (driver/root_dag.go:112-136: GetPipeline with the
// pipeline root's session info, then the DAG execution "run/<run id>"). RootDAG first reads the
// kfp-launcher ConfigMap through the in-cluster API (root_dag.go:86-90); without one its defaults
// apply, which a zero config.Config gives.
func (r *run) rootDAG() error {
	session, err := (&config.Config{}).GetStoreSessionInfo(r.root)
	if err != nil {
		return err
	}
	sessionJSON, err := json.Marshal(session)
	if err != nil {
		return err
	}
	if r.bucket, err = objectstore.ParseBucketConfig(r.root, &session); err != nil {
		return err
	}
	name := r.spec.GetPipelineInfo().GetName()
	r.pipeline, err = r.mlmd.GetPipeline(r.ctx, name, runID, runNamespace, "run-resource", r.root, string(sessionJSON))
	if err != nil {
		return err
	}
	ecfg, err := metadata.GenerateExecutionConfig(&pipelinespec.ExecutorInput{
		Inputs: &pipelinespec.ExecutorInput_Inputs{ParameterValues: map[string]*structpb.Value{}},
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

type task struct {
	name      string
	input     *pipelinespec.ExecutorInput
	execution *metadata.Execution
}

// container is driver.Container's path for a task of the root DAG with cache off
// (driver/container.go:44-155): its ExecutorInput (inputs resolved, outputs provisioned), then
// its execution created in MLMD. For the producer (strict false) only its outputs matter: its
// parameters other than runtime constants are left out of its ExecutorInput.
func (r *run) container(name string, artifacts map[string]*pipelinespec.ArtifactList, strict bool) (*task, error) {
	spec, ok := r.spec.GetRoot().GetDag().GetTasks()[name]
	if !ok {
		return nil, fmt.Errorf("no task %q in the root DAG", name)
	}
	component := r.spec.GetComponents()[spec.GetComponentRef().GetName()]
	parameters, err := constantParameters(name, spec, strict)
	if err != nil {
		return nil, err
	}
	input := &pipelinespec.ExecutorInput{
		Inputs:  &pipelinespec.ExecutorInput_Inputs{ParameterValues: parameters, Artifacts: artifacts},
		Outputs: provisionOutputs(r.root, name, component.GetOutputDefinitions(), uriSalt, publishLogs),
	}
	ecfg, err := metadata.GenerateExecutionConfig(input) // container.go:122-130
	if err != nil {
		return nil, err
	}
	ecfg.TaskName = name
	ecfg.DisplayName = spec.GetTaskInfo().GetName()
	ecfg.ExecutionType = metadata.ContainerExecutionTypeName
	ecfg.ParentDagID = r.dag.Execution.GetID()
	ecfg.NotTriggered = false
	execution, err := r.mlmd.CreateExecution(r.ctx, r.pipeline, ecfg) // container.go:148
	if err != nil {
		return nil, err
	}
	return &task{name: name, input: input, execution: execution}, nil
}

// constantParameters: resolveInputs' case for a task parameter given as a runtime constant
// (driver/resolve.go: runtimeValue.constant is passed on as it is). Other kinds need the
// upstream tasks' parameter outputs, which this check does not publish.
func constantParameters(name string, spec *pipelinespec.PipelineTaskSpec, strict bool) (map[string]*structpb.Value, error) {
	values := map[string]*structpb.Value{}
	for key, parameter := range spec.GetInputs().GetParameters() {
		constant := parameter.GetRuntimeValue().GetConstant()
		if constant == nil && !strict {
			continue
		}
		if constant == nil {
			return nil, fmt.Errorf("parameter %q of %s is not a runtime constant: not supported by this check", key, name)
		}
		values[key] = constant
	}
	return values, nil
}

// provisionOutputs follows driver/driver.go:476-527: one artifact per declared output (and the
// launcher's executor-logs when logs are published) under <root>/<task>/<salt>/<name>, each
// parameter's output file under /tmp/kfp/outputs/.
func provisionOutputs(root, taskName string, spec *pipelinespec.ComponentOutputsSpec, salt, publish string) *pipelinespec.ExecutorInput_Outputs {
	outputs := &pipelinespec.ExecutorInput_Outputs{
		Artifacts:  map[string]*pipelinespec.ArtifactList{},
		Parameters: map[string]*pipelinespec.ExecutorInput_OutputParameter{},
		OutputFile: outputMetadataFile,
	}
	artifacts := map[string]*pipelinespec.ComponentOutputsSpec_ArtifactSpec{}
	for name, artifact := range spec.GetArtifacts() {
		artifacts[name] = artifact
	}
	if publish == "true" {
		artifacts["executor-logs"] = &pipelinespec.ComponentOutputsSpec_ArtifactSpec{
			ArtifactType: &pipelinespec.ArtifactTypeSchema{
				Kind: &pipelinespec.ArtifactTypeSchema_SchemaTitle{SchemaTitle: "system.Artifact"},
			},
		}
	}
	for name, artifact := range artifacts {
		outputs.Artifacts[name] = &pipelinespec.ArtifactList{Artifacts: []*pipelinespec.RuntimeArtifact{{
			Uri:      metadata.GenerateOutputURI(root, []string{taskName, salt, name}, false),
			Type:     artifact.GetArtifactType(),
			Metadata: artifact.GetMetadata(),
		}}}
	}
	for name := range spec.GetParameters() {
		outputs.Parameters[name] = &pipelinespec.ExecutorInput_OutputParameter{
			OutputFile: "/tmp/kfp/outputs/" + name,
		}
	}
	return outputs
}

// publish: the launcher after the user container exits 0 (component/launcher_v2.go:519-570 uploadOutputArtifacts:
// RecordArtifact per output with getArtifactSchema's schema; launcher_v2.go:325
// PublishExecution COMPLETE). The executor's own output metadata file is not merged in
// (launcher_v2.go:532): no executor runs here.
func (r *run) publish(produced *task) error {
	var recorded []*metadata.OutputArtifact
	for name, list := range produced.input.GetOutputs().GetArtifacts() {
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
	return r.mlmd.PublishExecution(r.ctx, produced.execution, nil, recorded, pb.Execution_COMPLETE)
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

// resolveArtifacts: the driver's resolution of a task's inputs wired to an upstream task's
// output (driver/resolve.go:58 GetExecutionsInDAG; resolveUpstreamArtifacts, resolve.go:732
// GetOutputArtifactsByExecutionId and resolve.go:747 ToRuntimeArtifact).
func (r *run) resolveArtifacts(name string) (map[string]*pipelinespec.ArtifactList, error) {
	spec, ok := r.spec.GetRoot().GetDag().GetTasks()[name]
	if !ok {
		return nil, fmt.Errorf("no task %q in the root DAG", name)
	}
	executions, err := r.mlmd.GetExecutionsInDAG(r.ctx, r.dag, r.pipeline, true)
	if err != nil {
		return nil, err
	}
	resolved := map[string]*pipelinespec.ArtifactList{}
	for key, input := range spec.GetInputs().GetArtifacts() {
		upstream := input.GetTaskOutputArtifact()
		if upstream == nil {
			return nil, fmt.Errorf("input %q is not an upstream task's output: not supported by this check", key)
		}
		// The map is keyed by task name and DAG (metadata/client.go:868 GetTaskNameWithDagID).
		producer, ok := executions[metadata.GetTaskNameWithDagID(upstream.GetProducerTask(), r.dag.Execution.GetID())]
		if !ok {
			return nil, fmt.Errorf("input %q: producer task %q has no execution in the DAG", key, upstream.GetProducerTask())
		}
		outputs, err := r.mlmd.GetOutputArtifactsByExecutionId(r.ctx, producer.GetID())
		if err != nil {
			return nil, err
		}
		artifact, ok := outputs[upstream.GetOutputArtifactKey()]
		if !ok {
			return nil, fmt.Errorf("input %q: no output %q of %q", key, upstream.GetOutputArtifactKey(), upstream.GetProducerTask())
		}
		runtime, err := artifact.ToRuntimeArtifact()
		if err != nil {
			return nil, err
		}
		resolved[key] = &pipelinespec.ArtifactList{Artifacts: []*pipelinespec.RuntimeArtifact{runtime}}
	}
	return resolved, nil
}
