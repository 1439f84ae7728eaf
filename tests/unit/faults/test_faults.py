"""grpo.faults: each fault fires where and when the config says, once per step number, from outside the
parts it disturbs (the collector, the server backend, the update)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from grpo.config import FaultsConfig, load_config
from grpo.errors import ConfigError
from grpo.faults import Faults, InjectedFault, ServerFaults, install
from grpo.faults.names import AT_STEPS, key
from grpo.faults.schedule import Schedule
from grpo.rollout.engines import SamplingParams
from grpo.rollout.server.backend import Backend, Generation, LaunchSpec, ReloadMode
from grpo.rollout.server.client import ServerError
from tests.unit.rollout.test_collector import ScriptedEngine, collector


def test_every_fault_name_is_a_config_key():
    for name in AT_STEPS:
        assert load_config(None, [f"{key(name)}=[3]"]).testing.faults == FaultsConfig(**{f"{name}_at_steps": [3]})


def test_a_fault_this_run_cannot_have_is_refused_in_one_line(monkeypatch):
    with pytest.raises(ConfigError, match=r"^testing.faults.kill_server_at_steps needs a server engine"):
        install(load_config("tiny", ["testing.faults.kill_server_at_steps=[1]"]))
    monkeypatch.delenv("GRPO_SERVER_BUNDLES", raising=False)
    with pytest.raises(ConfigError, match=r"kill_server_actor_at_steps needs servers placed by Ray"):
        install(load_config("tiny", ["rollout.engine=sglang", "testing.faults.kill_server_actor_at_steps=[1]"]))
    assert isinstance(install(load_config("tiny", ["testing.faults.crash_at_step=2"])), Faults)


def test_the_loop_refuses_faults_it_was_not_given_hooks_for(tmp_path):
    from grpo.train.loop import TrainingLoop

    with pytest.raises(ConfigError, match="testing.faults.* are carried out by grpo.faults"):
        TrainingLoop(load_config("tiny", [f"run_dir={tmp_path / 'r'}", "testing.faults.crash_at_step=2"]))


def test_a_fault_fires_at_its_steps_once_per_step_number():
    schedule = Schedule(FaultsConfig(zero_reward_at_steps=[2, 3]))
    assert [schedule.fires("zero_reward", s) for s in (1, 2, 3)] == [False, True, True]
    assert schedule.fires("zero_reward", 2)  # as often as asked within the step (its retries too)
    schedule.step_done(2)
    assert not schedule.fires("zero_reward", 2)  # step 2 replayed after a rollback runs clean


def test_rollout_faults_corrupt_the_step_they_name_and_only_it():
    faults = Faults(FaultsConfig(empty_rollouts_at_steps=[2], reward_raises_at_steps=[3]))
    c, _ = collector(ScriptedEngine([]), max_retries=0, max_refill_rounds=0)
    faulty = faults.wrap_collector(c)
    assert len(faulty.collect(1, 0).groups) == 2
    empty = faulty.collect(2, 2)
    assert empty.attempts["empty"] == 4 and not empty.groups
    raising = faulty.collect(3, 4)  # a failed reward is no score, never a 0
    assert raising.attempts["unscorable"] == 4 and InjectedFault.__name__ in raising.reward_errors[0]
    assert len(c.collect(2, 2).groups) == 2  # the collector itself is untouched
    faults.step_end(2)
    assert len(faulty.collect(2, 2).groups) == 2


def test_a_nan_loss_makes_the_update_non_finite_on_its_step_only():
    from grpo.algo.loss import LossConfig
    from grpo.config import ActorConfig
    from grpo.policy.optim import MasterWeightAdamW
    from grpo.policy.update import update_policy
    from tests.unit.policy.test_update import group_batch, tiny

    model, tok = tiny()
    faults = Faults(FaultsConfig(nan_loss_at_steps=[2]))
    faults.model = model
    optimizer = MasterWeightAdamW(model, ActorConfig(lr=1e-2))

    def update(step: int):
        with faults.around_update(step):
            return update_policy(model, optimizer, group_batch(tok), LossConfig(), updates=1, micro_batch_size=4,
                                 max_grad_norm=1.0, temperature=1.0, pad_id=tok.pad_token_id)

    bad = update(2)
    assert not bad.applied and bad.skip_reason.startswith("non-finite loss")
    assert update(3).applied  # the hook is gone with the step
    assert all(torch.isfinite(p).all() for p in model.parameters())


class RecordingBackend(Backend):
    """Records what the server engine's calls would have done to a server."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def launch(self, cfg, python, model_dir, host, port, dtype, seed) -> LaunchSpec:
        return LaunchSpec([])

    def generate(self, client, prompt_ids, params, seed, timeout_s=None) -> Generation:
        self.calls.append(("generate", seed))
        return Generation([1], [-0.5], "stop")

    def prompt_logprobs(self, client, token_ids):
        return [0.0] * (len(token_ids) - 1)

    def reload_weights(self, client, model_dir, mode) -> None:
        self.calls.append(("reload", mode))

    def reset_cache(self, client) -> None:
        self.calls.append(("reset",))


def test_sync_faults_change_the_next_reload_once():
    inner = RecordingBackend()
    server = ServerFaults(inner, Schedule(FaultsConfig(skip_weight_sync_at_steps=[1], no_cache_reset_at_steps=[1])))
    server.arm(1)
    for _ in range(2):
        server.reload_weights(None, Path("m"), ReloadMode.FULL)
        server.reset_cache(None)
    assert inner.calls == [("reload", ReloadMode.SKIP), ("reload", ReloadMode.FULL), ("reset",)]


def test_garbage_answers_every_request_of_the_steps_first_generation_only():
    inner = RecordingBackend()
    server = ServerFaults(inner, Schedule(FaultsConfig(garbage_server_at_steps=[1])))
    params = SamplingParams(4)
    server.arm(1)
    server.generate(None, [1], params, seed=0)  # outside the generation's window: a probe, a health check
    with server.window():
        for seed in (1, 2):
            with pytest.raises(ServerError, match="injected garbage"):
                server.generate(None, [1], params, seed=seed)
    with server.window():  # the retry's generation: answered
        server.generate(None, [1], params, seed=3)
    assert inner.calls == [("generate", 0), ("generate", 3)]
    with pytest.raises(ValueError, match="unknown server faults"):
        server.arm_now({"garbage"})
