"""`grpo plan` and `grpo train`'s refusal of a run that cannot fit in memory, through the real CLI."""

import re

import pytest

from grpo.cli import main
from grpo.config import load_config
from grpo.tools.plan import GIB, architecture, plan_memory, prompt_tokens

# A tiny model wide enough that its update's activations and logits, not the runtime, decide the peak.
WIDE = ["model.tiny.hidden_size=256", "model.tiny.intermediate_size=1024", "model.tiny.num_layers=4",
        "rollout.problems_per_step=8", "rollout.samples_per_problem=8", "rollout.max_new_tokens=64",
        "algo.micro_batch_size=64", "model.device=cpu"]  # the CPU's plan: a GPU's counts its CUDA context


def test_plan_prints_each_phase_and_its_peak(capsys):
    assert main(["plan", "--config", "tiny", *WIDE, "memory.limit_gib=64"]) == 0
    out = capsys.readouterr().out
    for phase in ("load", "generation", "update"):
        assert re.search(rf"^  {phase} +\d+\.\d\d GiB$", out, re.M)
    assert "available: 64.00 GiB (memory.limit_gib): fits" in out


def test_a_run_that_cannot_fit_is_refused_with_the_knob_and_nothing_is_written(tmp_path, capsys):
    cfg = load_config("tiny", WIDE)
    arch, prompt_len = architecture(cfg), prompt_tokens(cfg)
    peak = plan_memory(cfg, "cpu", arch, prompt_len).peak_bytes
    limit = (peak - 0.05 * GIB) / GIB  # between what it needs and what a smaller micro-batch needs
    run_dir = tmp_path / "run"
    assert main(["train", "--config", "tiny", "--run-dir", str(run_dir), *WIDE, f"memory.limit_gib={limit}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    match = re.search(r"needs (\d+\.\d) GiB of memory at its peak \(update\), (\d+\.\d) GiB is available "
                      r"\(memory.limit_gib\): set algo.micro_batch_size=(\d+) \(from 64\)", err)
    assert match, err
    assert float(match[1]) == round(peak / GIB, 1) and float(match[2]) == round(limit, 1)
    assert not run_dir.exists()  # refused before the run directory was made
    # The suggested micro-batch size fits the same limit.
    assert main(["plan", "--config", "tiny", *WIDE, f"memory.limit_gib={limit}",
                 f"algo.micro_batch_size={match[3]}"]) == 0
    assert "fits" in capsys.readouterr().out


# The tiny model with a KV token of 16 KiB: 0.001 GiB holds 65 tokens, fewer than the weight probe's 204.
DEEP = ["model.tiny.hidden_size=256", "model.tiny.num_layers=8", "model.device=cpu", "memory.limit_gib=8"]


@pytest.mark.parametrize("kv_cache_gib, why", [("1000", "more than the 7.5 GiB left beside the trainer"),
                                               ("0.001", "a KV cache of 65 tokens of this model")])
def test_a_server_cache_that_cannot_work_is_refused_before_any_server_starts(tmp_path, capsys, kv_cache_gib, why):
    started = tmp_path / "started"
    server = tmp_path / "server.py"
    server.write_text(f"open({str(started)!r}, 'w').close()\n")  # what a launched server would leave
    overrides = [*DEEP, "rollout.engine=sglang", f"rollout.server.command={{python}} {server}",
                 f"rollout.server.kv_cache_gib={kv_cache_gib}"]
    run_dir = tmp_path / "run"
    assert main(["train", "--config", "tiny", "--run-dir", str(run_dir), *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"config error: rollout.server.kv_cache_gib={kv_cache_gib} ")
    assert why in err, err
    assert not run_dir.exists() and not started.exists()
    # grpo plan says the same, and the value the line names is accepted.
    assert main(["plan", "--config", "tiny", *overrides]) == 1
    assert err.removeprefix("config error: ") in capsys.readouterr().out
    value = re.search(r"set rollout.server.kv_cache_gib=([\d.]+)", err)[1]
    assert main(["plan", "--config", "tiny", *overrides, f"rollout.server.kv_cache_gib={value}"]) == 0
    assert re.search(r"^1 sglang server\(s\) x .* left beside the trainer: fits$", capsys.readouterr().out, re.M)
