"""ExampleValidator that stops the pipeline when the data has anomalies."""
