"""Every key of a metrics line is a name in grpo.metric_keys: a writer that spells its own key (as the
update's measures once were, prefixed by the step record) fails here."""

import re

from grpo import metric_keys as keys
from grpo.rollout.types import SampleStatus

from .helpers import metric_lines, run_tiny

ANY = "ANY"


def _pattern(key: str) -> str:
    """A key made by one of metric_keys' functions, each `ANY` argument standing for any name."""
    return re.escape(key).replace(ANY, r"[\w.@-]+")


NAMED = {value for name, value in vars(keys).items()
         if name.isupper() and isinstance(value, str) and not name.endswith("_PREFIX")}
MADE = re.compile("|".join([
    *(re.escape(keys.status_count(status.value)) for status in SampleStatus),
    *(_pattern(keys.reward_part(ANY, statistic)) for statistic in ("mean", "std")),
    _pattern(keys.reward_metric(ANY)),  # what a reward function gave TRL's log_metric, by its name
    _pattern(keys.phase_time(ANY)), _pattern(keys.phase_peak_memory(ANY)),
    _pattern(keys.EVAL_PREFIX + ANY),  # a held-out evaluation's own measures, by their names
]))


def test_every_key_of_a_tiny_runs_metrics_lines_is_named_in_metric_keys(tmp_path):
    # Off policy, with a KL penalty, recomputed old log-probs and an evaluation: most optional keys appear.
    run_tiny([f"run_dir={tmp_path / 'r'}", "train.steps=3", "checkpoint.every_steps=0", "eval.every_steps=2",
              "eval.max_samples=4", "algo.kl_coef=0.01", "rollout.max_staleness=1",
              "algo.recompute_old_logprobs=true"])
    lines = metric_lines(tmp_path / "r")
    seen = {key for line in lines for key in line}
    assert {keys.KL, keys.OFFPOLICY_KL, keys.LOGPROB_MISMATCH, keys.CLIP_HIGH_FRAC} <= seen
    assert any(key.startswith(keys.EVAL_PREFIX) for key in seen)
    assert sorted(key for key in seen if key not in NAMED and not MADE.fullmatch(key)) == []
    assert not MADE.fullmatch("clip_frac") and "clip_frac" not in NAMED  # a bare measure would be caught
