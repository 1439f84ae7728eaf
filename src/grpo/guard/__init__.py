"""The guard: circuit breakers that watch each step and return verdicts (grpo.train.verdicts carries them out)."""
