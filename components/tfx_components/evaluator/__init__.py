"""TFX's Evaluator, reading its baseline from BaselineModel (absent when that is empty)."""
