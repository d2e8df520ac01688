"""The components create_pipeline() builds, in run order: one list for every test that counts
them."""

AFTER_EXAMPLE_GEN = (
    "ImportSchemaGen",
    "StatisticsGen",
    "ExampleValidator",
    "Transform",
    "Trainer",
    "BaselineModel",
    "Evaluator",
    "Pusher",
)
CSV_COMPONENTS = ("CsvExampleGen", *AFTER_EXAMPLE_GEN)
IMAGE_COMPONENTS = ("ImageExampleGen", *AFTER_EXAMPLE_GEN)
