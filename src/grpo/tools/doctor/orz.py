"""An Open-Reasoner-Zero console log (its PPO trainer is OpenRLHF's, reworked): loguru lines, a step at a time,

    ... | INFO | orz.ppo.trainer:make_experience:748 - avg_raw_rewards: 0.105, avg_kl: 0.0, ...
    ... | INFO | orz.ppo.trainer:train:189 - {'policy_loss': -0.022, 'kl': 0.0, 'entropy': 0.83, ...}
    Episode [1/20]:   0%|          | 1/7110 [08:00<949:15:10, 480.70s/it]

The experience line comes first (the step's rewards), the status dict once the step has trained, and the
episode bar after it counts the step; its count starts again each episode, so the step is (episode - 1) x the
episode's length + the count. A step is taken at its status dict, numbered one past the last, and the bar
after it renumbers it where the log was copied from mid-run: a crash before the status dict ended the step in
progress. Every `eval_interval` steps an evaluation prints `eval_accuracy: ...`. The critic's loss is only
in its progress bar's postfix, and no gradient norm is printed.
"""

from __future__ import annotations

import re
from pathlib import Path

from grpo.tools.doctor.logreader import LogReader
from grpo.tools.doctor.record import ENTROPY, EVAL_ACCURACY, KL, LENGTH, LOSS, REWARD, Evidence
from grpo.tools.doctor.textlog import as_step, number

SOURCE = "open-reasoner-zero"
_EXPERIENCE = re.compile(r"\bavg_raw_rewards: .*")
_STATUS = re.compile(r":train:\d+ - (\{'policy_loss'.*)$")
_PAIR = re.compile(r"'?(\w+)'?: ([^,}]+)")
_BAR = re.compile(r"Episode \[(\d+)/(\d+)\]:[^|]*\|[^|]*\|\s*(\d+)/(\d+)")
_EVAL = re.compile(r"\beval_accuracy: (\S+)")
_EXPERIENCE_KEYS = {"avg_raw_rewards": REWARD, "avg_response_length": LENGTH}
_STATUS_KEYS = {"policy_loss": LOSS, "kl": KL, "entropy": ENTROPY, "response_length": LENGTH}


class OrzReader(LogReader):
    source = SOURCE

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.experience: dict[str, float] = {}  # the step in progress's rewards, until it trains
        self.counted = 0  # the last step a bar numbered

    def line(self, number_: int, line: str) -> None:
        if "avg_raw_rewards" in line:
            experience = _EXPERIENCE.search(line)
            if experience:
                self.experience = _values(experience.group(0), _EXPERIENCE_KEYS)
        if "'policy_loss'" in line:
            status = _STATUS.search(line)
            if status:
                self._trained(number_, line, _values(status.group(1), _STATUS_KEYS))
        if "Episode [" in line:
            bar = _BAR.search(line)
            if bar:
                self._counted(*(int(group[:12]) for group in bar.groups()))
        if "eval_accuracy" in line and self.current:
            evaluated = _EVAL.search(line)
            value = number(evaluated.group(1)) if evaluated else None
            if value is not None:
                self.record.put(self.current, EVAL_ACCURACY, value)

    def _trained(self, number_: int, line: str, status: dict[str, float]) -> None:
        step = self.current + 1
        for name, value in {**self.experience, **status}.items():
            self.record.put(step, name, value)
        self.record.evidence_by_step[step] = Evidence(str(self.path), number_, line.strip()[:300])
        self.current, self.experience = step, {}

    def _counted(self, episode: int, episodes: int, count: int, length: int) -> None:
        step, total = as_step((episode - 1) * length + count), as_step(episodes * length)
        self.record.total_steps = total or self.record.total_steps
        if not count or step is None:
            return  # the bar drawn before the episode's first step
        record = self.record
        if self.current > self.counted and step != self.current and self.current in record.metrics \
                and step not in record.metrics:
            record.renumber(self.current, step)
            self.current = step
        self.counted = max(self.counted, step)


def _values(text: str, keys: dict[str, str]) -> dict[str, float]:
    values = {}
    for key, value_text in _PAIR.findall(text):
        value = number(value_text)
        if key in keys and value is not None:
            values[keys[key]] = value
    return values
