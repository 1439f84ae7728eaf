"""A prime-rl log: its trainer and its orchestrator each print one line a step,

    15:41:30 SUCCESS Step 9 | Time: 4.29s | Loss: 0.0000 | Entropy: 0.3571 | Mismatch KL: 0.0007 | Grad. Norm: ...
    02:33:26 SUCCESS Step 28 | Time: 73.77s | Reward: 0.3887 | Throughput: 2408.9 tokens/s | Seq. Length: ...

(the trainer's under torchrun's `[default0]:` prefix). The trainer's log holds the update (loss, gradient
norm, entropy, peak memory), the orchestrator's the rollouts (reward, sequence length): each is read on its
own. Mismatch KL is between the inference engine's log-probabilities and the trainer's, not KL to a
reference, and is not read as KL. A step number that goes back starts a new attempt (a resume).
"""

from __future__ import annotations

import re

from grpo.tools.doctor.logreader import LogReader
from grpo.tools.doctor.record import ENTROPY, GRAD_NORM, LENGTH, LOSS, MEMORY_GIB, REWARD, STEP_S, Evidence, Mark
from grpo.tools.doctor.textlog import as_step, number

SOURCE = "prime-rl"
_STEP = re.compile(r"\bSUCCESS Step (\d+) \| (.*)$")
_KEYS = {"Loss": LOSS, "Entropy": ENTROPY, "Grad. Norm": GRAD_NORM, "Reward": REWARD, "Seq. Length": LENGTH,
         "Time": STEP_S, "Peak Mem.": MEMORY_GIB}


class PrimeRlReader(LogReader):
    source = SOURCE

    def line(self, number_: int, line: str) -> None:
        if "SUCCESS Step" not in line:
            return
        match = _STEP.search(line)
        step = as_step(int(match.group(1)[:12])) if match else None
        if step is None:
            return
        values = {}
        for pair in match.group(2).split(" | "):
            key, sep, value_text = pair.partition(": ")
            value = number(value_text) if sep else None
            if key.strip() in _KEYS and value is not None:
                values[_KEYS[key.strip()]] = value
        if not values:
            return
        evidence = Evidence(str(self.path), number_, line.strip()[:300])
        if step <= self.current:
            self.record.restart(Mark(step, "restart", f"the step count went back from {self.current} to {step}",
                                     evidence))
        for name, value in values.items():
            self.record.put(step, name, value)
        self.record.evidence_by_step[step] = evidence
        self.current = step
