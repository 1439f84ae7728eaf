"""Every fault, named once. A fault `NAME` of these lists is set as `testing.faults.NAME_at_steps`."""

from __future__ import annotations

from grpo.config import FaultsConfig

GENERATION = ("fail_rollouts", "empty_rollouts")  # completions turned to failed or empty samples
REWARD = ("zero_reward", "reward_raises")  # the reward functions replaced for the step
# A server's failures in the step's first generation (servers[0], as its requests go out) ...
SERVER_ROLLOUT = ("kill_server", "kill_server_actor", "hang_server", "garbage_server")
# ... and in the next weight sync (the reload, the cache reset)
SERVER_SYNC = ("kill_server_in_sync", "skip_weight_sync", "stale_head_sync", "no_cache_reset")
SERVER = SERVER_ROLLOUT + SERVER_SYNC
UPDATE = ("nan_loss",)
AT_STEPS = GENERATION + REWARD + SERVER + UPDATE


def key(name: str) -> str:
    return f"testing.faults.{name}_at_steps"


def steps(cfg: FaultsConfig, name: str) -> list[int]:
    return getattr(cfg, f"{name}_at_steps")
