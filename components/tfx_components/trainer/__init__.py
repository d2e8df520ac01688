"""TFX's Trainer executor, running the project's run_fn or a user's on every strategy."""
