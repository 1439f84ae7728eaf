"""Rollout engines: the seam between the trainer and whatever generates completions."""

from grpo.rollout.engines.base import Completion, GenerationCancelled, RolloutEngine, SampleStatus, SamplingParams

__all__ = ["Completion", "GenerationCancelled", "RolloutEngine", "SampleStatus", "SamplingParams"]
