"""Rollout engines: the seam between the trainer and whatever generates completions."""

from grpo.engine.base import Completion, RolloutEngine, SampleStatus, SamplingParams

__all__ = ["Completion", "RolloutEngine", "SampleStatus", "SamplingParams"]
