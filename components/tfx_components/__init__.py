"""The custom TFX components: sharded CSV and image ExampleGens, the SchemaGen that keeps every
CSV column a feature, the sharded Transform executor, the failing ExampleValidator, the baseline
read from the pushed models and the Evaluator that takes it."""
