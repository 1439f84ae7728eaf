"""Per-phase wall time and peak memory, so a slow or memory-hungry phase is visible in every step."""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

import torch

from grpo import metric_keys as keys


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        try:  # Linux: writing 5 resets the process's peak RSS (VmHWM)
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass


def _peak_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class PhaseTimer:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.metrics: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        _reset_peak(self.device)
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            key = keys.phase_time(name)
            self.metrics[key] = self.metrics.get(key, 0.0) + time.perf_counter() - start
            peak = _peak_bytes(self.device) / 2**30
            key = keys.phase_peak_memory(name)
            self.metrics[key] = max(self.metrics.get(key, 0.0), peak)

    def pop(self) -> dict[str, float]:
        metrics, self.metrics = self.metrics, {}
        return metrics
