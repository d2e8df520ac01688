"""BaselineModel: the Evaluator's baseline, read from the push destination's versions."""
