"""A tiny model really learns: reward rises on an easy task within a few seconds of training."""

import statistics

from .helpers import metric_lines, run_tiny


def test_reward_rises_on_an_easy_task(tmp_path):
    run_tiny([f"run_dir={tmp_path / 'r'}", "train.steps=30", "actor.lr=3e-3", "checkpoint.every_steps=0",
              "checkpoint.every_minutes=0"])
    rewards = [line["reward/mean"] for line in metric_lines(tmp_path / "r")]
    first, last = statistics.fmean(rewards[:5]), statistics.fmean(rewards[-5:])
    assert last > first + 0.2, (first, last)
    assert last > 0.5
