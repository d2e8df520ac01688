"""tf.Transform on Beam with a fixed number of output shards."""
