"""TFX's Tuner with the user's module importable and KerasTuner's distributed mode locally."""
