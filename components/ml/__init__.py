"""User ML code: feature names, preprocessing_fn (tabular and images), the Keras model, its
tf.data input pipeline and the serving export. TFX loads it by module path."""
