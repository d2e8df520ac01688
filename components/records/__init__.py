"""Record I/O: tf.Example wire format, bulk TFRecord reads and writes, the Arrow RecordBatch
coder."""
