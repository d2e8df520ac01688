"""SchemaGen that keeps every column a feature (executor.ColumnSchemaGen)."""
