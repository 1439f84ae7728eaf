"""Training: the GRPO loop (`loop`) and what only it uses — the builder, the run's state, the step's
record, the guard's verdicts carried out, timing, metrics, signals, held-out evaluation. Only entry
points (`grpo.entry`, `grpo.api`, `grpo.cli`) import this package."""
