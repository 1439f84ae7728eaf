"""Rollout engines: the seam between the trainer and whatever generates completions."""

from grpo.rollout.engines.base import RolloutEngine
from grpo.rollout.types import Completion, GenerationCancelled, SampleStatus, SamplingParams

__all__ = ["Completion", "GenerationCancelled", "RolloutEngine", "SampleStatus", "SamplingParams"]
