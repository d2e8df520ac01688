"""ExampleGen for CSV files: stock TFX component and driver, sharded and accounted executor."""
