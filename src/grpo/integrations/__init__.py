"""grpo's guard inside trainers grpo does not own: `grpo.integrations.trl` for TRL's GRPOTrainer."""
