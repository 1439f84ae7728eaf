"""The guard: circuit breakers that watch each step and return verdicts (grpo.verdicts carries them out)."""
