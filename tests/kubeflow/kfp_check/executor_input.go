package main

// kfp_check executor-input PIPELINE.yaml MLMD_HOST:PORT PRODUCER CONSUMER OUT_DIR
//
// The hand-off between two tasks as the KFP backend performs it, against a real ML Metadata
// store reached over gRPC (the tests serve one): the run's pipeline context and root DAG
// execution as the root DAG driver records them, PRODUCER's driver (driver.Container), its
// outputs published as its launcher publishes them, then CONSUMER's driver, which resolves its
// input artifacts from MLMD (driver/resolve.go: GetOutputArtifactsByExecutionId, then
// OutputArtifact.ToRuntimeArtifact). Written to OUT_DIR: <task>.executor_input.json (the
// ExecutorInput protojson-marshalled, as the launcher substitutes it for {{$}}) and
// <task>.pod_spec_patch.json (the driver's patch of the task's pod: image, command, resources).

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/kubeflow/pipelines/api/v2alpha1/go/pipelinespec"
	"github.com/kubeflow/pipelines/backend/src/apiserver/template"
	"github.com/kubeflow/pipelines/backend/src/v2/config"
	"github.com/kubeflow/pipelines/backend/src/v2/driver"
	"github.com/kubeflow/pipelines/backend/src/v2/metadata"
	"github.com/kubeflow/pipelines/backend/src/v2/objectstore"
	pb "github.com/kubeflow/pipelines/third_party/ml-metadata/go/ml_metadata"
	"github.com/kubeflow/pipelines/kubernetes_platform/go/kubernetesplatform"
	"google.golang.org/protobuf/encoding/protojson"
)

type handOff struct {
	ctx      context.Context
	spec     *pipelinespec.PipelineSpec
	platform *pipelinespec.SinglePlatformSpec
	mlmd     *metadata.Client
	name     string
	root     string
	bucket   *objectstore.Config
	dagID    int64
	outDir   string
}

func executorInput(args []string) error {
	if len(args) != 5 {
		return fmt.Errorf("executor-input needs PIPELINE.yaml MLMD_HOST:PORT PRODUCER CONSUMER OUT_DIR, got %d arguments", len(args))
	}
	pipelinePath, address, producer, consumer, outDir := args[0], args[1], args[2], args[3], args[4]
	content, err := os.ReadFile(pipelinePath)
	if err != nil {
		return err
	}
	parsed, err := template.NewV2SpecTemplate(content, false, nil)
	if err != nil {
		return fmt.Errorf("%s: upload parser: %w", pipelinePath, err)
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("MLMD address %q: %w", address, err)
	}
	client, err := metadata.NewClient(host, port)
	if err != nil {
		return err
	}
	h := &handOff{
		ctx:    context.Background(),
		spec:   parsed.PipelineSpec(),
		mlmd:   client,
		name:   parsed.PipelineSpec().GetPipelineInfo().GetName(),
		root:   parsed.PipelineSpec().GetDefaultPipelineRoot(),
		outDir: outDir,
	}
	if platform := parsed.PlatformSpec(); platform != nil {
		h.platform = platform.GetPlatforms()["kubernetes"]
	}
	if err := h.rootDAG(); err != nil {
		return fmt.Errorf("root DAG: %w", err)
	}
	produced, err := h.container(producer)
	if err != nil {
		return fmt.Errorf("%s: %w", producer, err)
	}
	if err := h.publish(produced); err != nil {
		return fmt.Errorf("%s: publishing its outputs: %w", producer, err)
	}
	if _, err := h.container(consumer); err != nil {
		return fmt.Errorf("%s: %w", consumer, err)
	}
	return nil
}

// rootDAG records what driver.RootDAG records (backend/src/v2/driver/root_dag.go, RootDAG: the
// pipeline and run contexts through GetPipeline, then the DAG execution "run/<run id>"). RootDAG
// itself first reads the kfp-launcher ConfigMap through the in-cluster Kubernetes API; its
// defaults (no ConfigMap: a zero config.Config) are used here instead.
func (h *handOff) rootDAG() error {
	session, err := (&config.Config{}).GetStoreSessionInfo(h.root)
	if err != nil {
		return err
	}
	sessionJSON, err := json.Marshal(session)
	if err != nil {
		return err
	}
	if h.bucket, err = objectstore.ParseBucketConfig(h.root, &session); err != nil {
		return err
	}
	pipeline, err := h.mlmd.GetPipeline(h.ctx, h.name, runID, runNamespace, "run-resource", h.root, string(sessionJSON))
	if err != nil {
		return err
	}
	ecfg, err := metadata.GenerateExecutionConfig(&pipelinespec.ExecutorInput{
		Inputs: &pipelinespec.ExecutorInput_Inputs{ParameterValues: nil},
	})
	if err != nil {
		return err
	}
	ecfg.ExecutionType = metadata.DagExecutionTypeName
	ecfg.Name = "run/" + runID
	execution, err := h.mlmd.CreateExecution(h.ctx, pipeline, ecfg)
	if err != nil {
		return err
	}
	h.dagID = execution.GetID()
	return nil
}

// container runs the container driver for one task of the root DAG with the arguments the
// compiled Workflow's driver step passes (argocompiler/container.go: component, task, container,
// kubernetes_config; cache off so that no KFP API server is called) and writes its results.
func (h *handOff) container(taskName string) (*driver.Execution, error) {
	task, ok := h.spec.GetRoot().GetDag().GetTasks()[taskName]
	if !ok {
		return nil, fmt.Errorf("no task %q in the root DAG", taskName)
	}
	component := h.spec.GetComponents()[task.GetComponentRef().GetName()]
	label := component.GetExecutorLabel()
	deployment := &pipelinespec.PipelineDeploymentConfig{}
	deploymentJSON, err := h.spec.GetDeploymentSpec().MarshalJSON()
	if err != nil {
		return nil, err
	}
	if err := protojson.Unmarshal(deploymentJSON, deployment); err != nil {
		return nil, err
	}
	executor := deployment.GetExecutors()[label]
	if executor.GetContainer() == nil {
		return nil, fmt.Errorf("executor %q is not a container", label)
	}
	options := driver.Options{
		PipelineName:   h.name,
		RunID:          runID,
		Component:      component,
		IterationIndex: -1,
		Task:           task,
		DAGExecutionID: h.dagID,
		Container:      executor.GetContainer(),
		CacheDisabled:  true,
		PublishLogs:    "false",
		DriverType:     "CONTAINER",
		TaskName:       taskName,
	}
	if settings, ok := h.platform.GetDeploymentSpec().GetExecutors()[label]; ok {
		settingsJSON, err := protojson.Marshal(settings)
		if err != nil {
			return nil, err
		}
		options.KubernetesExecutorConfig = &kubernetesplatform.KubernetesExecutorConfig{}
		if err := protojson.Unmarshal(settingsJSON, options.KubernetesExecutorConfig); err != nil {
			return nil, fmt.Errorf("kubernetes config of %q: %w", label, err)
		}
	}
	execution, err := driver.Container(h.ctx, options, h.mlmd, nil)
	if err != nil {
		return nil, err
	}
	// The launcher substitutes protojson.Marshal(executorInput) for {{$}}
	// (backend/src/v2/component/launcher_v2.go, compileCmdAndArgs).
	inputJSON, err := protojson.Marshal(execution.ExecutorInput)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(h.outDir, taskName+".executor_input.json"), inputJSON, 0o644); err != nil {
		return nil, err
	}
	patch := filepath.Join(h.outDir, taskName+".pod_spec_patch.json")
	return execution, os.WriteFile(patch, []byte(execution.PodSpecPatch), 0o644)
}

// publish records the task's output artifacts and completes its execution as its launcher does
// after the user container exits 0 (backend/src/v2/component/launcher_v2.go: uploadOutputArtifacts
// calls RecordArtifact with getArtifactSchema's schema; then PublishExecution COMPLETE).
func (h *handOff) publish(produced *driver.Execution) error {
	execution, err := h.mlmd.GetExecution(h.ctx, produced.ID)
	if err != nil {
		return err
	}
	var artifacts []*metadata.OutputArtifact
	for name, list := range produced.ExecutorInput.GetOutputs().GetArtifacts() {
		for _, artifact := range list.GetArtifacts() {
			schema, err := artifactSchema(artifact.GetType())
			if err != nil {
				return fmt.Errorf("output %q: %w", name, err)
			}
			recorded, err := h.mlmd.RecordArtifact(h.ctx, name, schema, artifact, pb.Artifact_LIVE, h.bucket)
			if err != nil {
				return fmt.Errorf("output %q: %w", name, err)
			}
			artifacts = append(artifacts, recorded)
		}
	}
	return h.mlmd.PublishExecution(h.ctx, execution, nil, artifacts, pb.Execution_COMPLETE)
}

// artifactSchema is the launcher's getArtifactSchema (unexported there;
// backend/src/v2/component/launcher_v2.go at the pinned commit): the instance schema, or
// "title: " + the schema title.
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
