"""TFX's BulkInferrer, whose executor also writes the predictions as a CSV file."""
