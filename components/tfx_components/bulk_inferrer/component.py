"""CsvBulkInferrer: TFX's own BulkInferrer component (spec, driver, InferenceResult output),
with an executor that, after TFX's inference, writes the predictions as a CSV file inside the
InferenceResult (components.tfx_components.bulk_inferrer.executor)."""

from __future__ import annotations

import json

from tfx.components import BulkInferrer
from tfx.dsl.components.base import executor_spec
from tfx.proto import bulk_inferrer_pb2

from components.ml import features
from components.tfx_components.bulk_inferrer import executor


class CsvBulkInferrer(BulkInferrer):
    """BulkInferrer over one split of rows to predict with the model's serving signature, run
    only when the model is blessed (TFX's executor checks model_blessing). Two execution
    properties beyond TFX's: the CSV columns of the rows, in file order, and the label's name
    (the predicted value's column is predicted_<label>)."""

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(
        self,
        *,
        examples,
        model,
        model_blessing,
        split: str,
        columns: tuple[str, ...],
        label_key: str,
        signature: str = features.SERVING_SIGNATURE,
    ):
        super().__init__(
            examples=examples,
            model=model,
            model_blessing=model_blessing,
            data_spec=bulk_inferrer_pb2.DataSpec(example_splits=[split]),
            model_spec=bulk_inferrer_pb2.ModelSpec(model_signature_name=[signature]),
        )
        # Parameters of this executor, recorded and cache-keyed like TFX's own (as the
        # pipeline's user-module property is: pipeline.builder).
        self.exec_properties[executor.COLUMNS_KEY] = json.dumps(list(columns))
        self.exec_properties[executor.LABEL_KEY] = label_key
