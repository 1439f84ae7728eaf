"""The corpus of real runs in tests/data/real_runs/: each folder one run as its user had it (logs
verbatim from public repositories and issue threads), with a `SOURCE` (YAML) saying where it came from
and what really happened. `score` judges the doctor's diagnosis of one run against that truth."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).parent / "data" / "real_runs"
# A truth's cause and the doctor's causes that name it (the doctor may say the rollouts failed where the
# thread says the server did: the same infrastructure).
SAME = {"server_failure": {"server_failure", "rollout_failure"}, "reward_source_died": {"reward_source_died",
                                                                                          "server_failure"}}


@dataclass(frozen=True)
class RealRun:
    name: str
    folder: Path
    source: dict

    @property
    def target(self) -> Path:
        return self.folder / str(self.source.get("path", "."))

    @property
    def healthy(self) -> bool:
        return self.source["status"] == "healthy"


def runs(root: Path = ROOT) -> list[RealRun]:
    """The runs under `root` (tests/data/logged_runs/ holds the same shape: a folder and its SOURCE per run)."""
    return [RealRun(p.parent.name, p.parent, yaml.safe_load(p.read_text())) for p in sorted(root.glob("*/SOURCE"))]


def score(run: RealRun, diagnosis) -> list[str]:
    """What the diagnosis got wrong about the run (empty: right in cause, first bad step and checkpoint)."""
    truth = run.source
    wrong = []
    if run.healthy:
        # "unknown" is right only for a log that holds no reward, or one copied while the run was still going
        # (`log_ends: mid_run`: from the file alone that is a run killed without a word): healthy needs evidence.
        if diagnosis.status == "problem":
            wrong.append(f"called {diagnosis.cause} from step {diagnosis.first_bad_step}, but it was healthy")
        elif diagnosis.status == "unknown" and truth.get("metrics_in_log", True) and truth.get("log_ends") != "mid_run":
            wrong.append("unknown, but the log holds the run's metrics")
        return wrong
    if diagnosis.cause not in SAME.get(truth["cause"], {truth["cause"]}):
        wrong.append(f"cause {diagnosis.cause}, truth {truth['cause']}")
    step, interval = truth.get("first_bad_step"), int(truth.get("logging_interval") or 1)
    if step is not None and (diagnosis.first_bad_step is None or abs(diagnosis.first_bad_step - step) > interval):
        wrong.append(f"first bad step {diagnosis.first_bad_step}, truth {step} (logging interval {interval})")
    checkpoint = truth.get("checkpoint")
    named = diagnosis.last_good_checkpoint
    if (checkpoint is None) != (named is None) or (checkpoint is not None and not _names_step(named, checkpoint)):
        wrong.append(f"checkpoint {named}, truth {checkpoint}")
    return wrong


def _names_step(path: str, step: int) -> bool:
    import re
    numbers = [int(n) for n in re.findall(r"\d+", Path(path).name)]
    return step in numbers or (step - 1) in numbers  # AReaL's globalstep G holds the state after step G+1
