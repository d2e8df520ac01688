"""Image ExampleGen: class folders of JPEG/PNG files -> sharded TFRecords of tf.Examples."""
