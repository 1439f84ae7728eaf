"""The guard: circuit breakers that return verdicts, deliberate faults, recovery actions' records, events."""
