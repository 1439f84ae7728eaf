"""The rollout queue (grpo.rollout.queue) against a fake collector: which weights make which batch, where
each batch starts, what a checkpoint keeps, and how a slow or failing worker shows on the loop's thread."""

import threading
import traceback

import pytest

from grpo.rollout.collector import RolloutBatch
from grpo.rollout.queue import RolloutQueue

PER_STEP = 4  # data positions one batch consumes
WAIT_S = 30  # a bound on waiting for the worker, never a delay


class FakePolicy:
    def __init__(self) -> None:
        self.version = self.revision = 0

    def updated(self) -> None:
        self.version += 1
        self.revision += 1


class FakeEngine:
    """A server-like engine: it generates with the weights it serves (pinned = itself)."""

    def __init__(self) -> None:
        self.synced: list[int] = []

    def pinned(self, policy):
        return self

    def outlived(self, completion) -> bool:
        return False

    def sync_weights(self, policy):
        self.synced.append(policy.version)
        return {"weights/version": policy.version}


class FakeCollector:
    """Each batch takes PER_STEP data positions; `gates[step]` holds that step's generation until set;
    `fail_at` raises in that step's generation."""

    def __init__(self, gates: dict[int, threading.Event] | None = None, fail_at: int | None = None) -> None:
        self.calls: list[tuple[int, int, int, str]] = []  # (step, data index, revision, thread)
        self.started = {step: threading.Event() for step in range(1, 20)}
        self.gates, self.fail_at = gates or {}, fail_at

    def using(self, engine):
        return self

    def collect(self, step: int, data_index: int, revision: int | None = None) -> RolloutBatch:
        self.calls.append((step, data_index, revision, threading.current_thread().name))
        self.started[step].set()
        if step in self.gates:
            assert self.gates[step].wait(WAIT_S), "the test never released this step"
        if step == self.fail_at:
            raise RuntimeError(f"generation failed at step {step}")
        return RolloutBatch(groups=[], next_data_index=data_index + PER_STEP)


def make_queue(s: int, total: int = 10, collector: FakeCollector | None = None):
    collector, policy = collector or FakeCollector(), FakePolicy()
    queue = RolloutQueue(collector, FakeEngine(), policy, s, total, drain_before_sync=True)
    return queue, collector, policy


def train(queue: RolloutQueue, policy: FakePolicy, steps: range, data_index: int = 0) -> tuple[list, int]:
    """The loop's use of the queue: take each step's batch, then update (a new policy version)."""
    taken = []
    for step in steps:
        batch = queue.take(step, data_index)
        taken.append((step, batch.policy_version, batch.staleness, data_index))
        data_index = batch.next_data_index
        policy.updated()
    return taken, data_index


def test_s0_generates_each_batch_on_the_loops_thread_with_the_weights_it_updates():
    queue, collector, policy = make_queue(0)
    taken, _ = train(queue, policy, range(1, 4))
    assert queue.worker is None
    assert taken == [(1, 0, 0, 0), (2, 1, 0, 4), (3, 2, 0, 8)]
    assert {thread for *_, thread in collector.calls} == {threading.current_thread().name}
    queue.close()


@pytest.mark.parametrize("s", [1, 2, 3])
def test_batch_k_is_generated_by_the_weights_after_step_k_minus_1_minus_s(s):
    queue, collector, policy = make_queue(s, total=8)
    taken, end = train(queue, policy, range(1, 9))
    queue.close()
    assert [version for _, version, _, _ in taken] == [max(0, k - 1 - s) for k in range(1, 9)]
    assert [staleness for _, _, staleness, _ in taken] == [min(k - 1, s) for k in range(1, 9)]
    # Each batch starts where the one before it ended, and none is generated twice or past the end.
    assert [(step, start) for step, start, _, _ in collector.calls] == [(k, (k - 1) * PER_STEP) for k in range(1, 9)]
    assert [start for *_, start in taken] == [(k - 1) * PER_STEP for k in range(1, 9)] and end == 8 * PER_STEP
    assert {revision for _, _, revision, _ in collector.calls} == set(range(0, 8 - s))
    assert all(thread.startswith("rollout-queue") for *_, thread in collector.calls)


class Watched(dict):
    """A dict that notes which thread changes it."""

    def __init__(self) -> None:
        super().__init__()
        self.writers: set[str] = set()

    def __setitem__(self, key, value) -> None:
        self.writers.add(threading.current_thread().name)
        super().__setitem__(key, value)

    def __delitem__(self, key) -> None:
        self.writers.add(threading.current_thread().name)
        super().__delitem__(key)


def test_only_the_loops_thread_touches_the_queues_batches():
    queue, collector, policy = make_queue(2)
    queue.batches = Watched()
    train(queue, policy, range(1, 7))
    queue.state_dict(6)
    queue.close()
    assert queue.batches.writers == {threading.current_thread().name}


def test_a_slow_batch_does_not_hold_up_the_step_before_it():
    gate = threading.Event()
    queue, collector, policy = make_queue(1, collector=FakeCollector(gates={2: gate}))
    first = queue.take(1, 0)  # launches 1 and 2; returns as soon as 1 is done
    assert first.next_data_index == PER_STEP
    assert collector.started[2].wait(WAIT_S)
    assert 2 in queue.in_flight and 2 not in queue.batches  # still generating, in the background
    policy.updated()
    gate.set()
    second = queue.take(2, first.next_data_index)  # waits for it
    assert (second.policy_version, second.staleness, second.next_data_index) == (0, 1, 2 * PER_STEP)
    queue.close()


def test_a_failed_batch_fails_the_step_that_takes_it_on_the_loops_thread_with_its_traceback():
    queue, collector, policy = make_queue(1, collector=FakeCollector(fail_at=2))
    queue.take(1, 0)
    policy.updated()
    with pytest.raises(RuntimeError, match="generation failed at step 2") as caught:
        queue.take(2, PER_STEP)
    frames = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert "collect" in frames and "_generate" in frames  # the worker's frames, raised on this thread
    assert 2 not in queue.batches and 2 not in queue.in_flight  # nothing of it is left to train on
    closing = threading.Thread(target=queue.close)
    closing.start()
    closing.join(WAIT_S)
    assert not closing.is_alive()


def test_a_failure_in_the_background_surfaces_at_the_sync_before_a_server_changes_weights():
    gate = threading.Event()
    queue, collector, policy = make_queue(1, collector=FakeCollector(gates={2: gate}, fail_at=2))
    queue.take(1, 0)
    gate.set()
    policy.updated()
    with pytest.raises(RuntimeError, match="generation failed at step 2"):
        queue.sync_weights(policy)
    assert queue.engine.synced == []  # the server's weights did not change under a batch
    queue.close()


def test_a_resume_from_the_queues_state_ends_as_a_run_that_never_stopped():
    straight, _, straight_policy = make_queue(2, total=8)
    expected, _ = train(straight, straight_policy, range(1, 9))
    straight.close()

    first, _, policy = make_queue(2, total=8)
    _, data_index = train(first, policy, range(1, 4))
    saved = first.state_dict(3)
    first.close()
    assert sorted(saved["batches"]) == [4, 5] and saved["max_staleness"] == 2
    assert {b.policy_version for b in saved["batches"].values()} == {1, 2}  # not copies of older weights

    resumed, collector, policy = make_queue(2, total=8)
    policy.version = policy.revision = 3
    assert resumed.load_state_dict(saved, 3) == []
    rest, _ = train(resumed, policy, range(4, 9), data_index)
    resumed.close()
    assert expected[3:] == rest
    assert [step for step, *_ in collector.calls] == [6, 7, 8]  # 4 and 5 came from the checkpoint


def test_a_rollback_discards_every_queued_batch_and_the_checkpoints():
    queue, _, policy = make_queue(2, total=8)
    _, data_index = train(queue, policy, range(1, 4))
    saved = queue.state_dict(3)
    train(queue, policy, range(4, 6), data_index)
    # In memory: 5 (the batch just trained on: it may be the one that tripped), 6 and 7; then the checkpoint's.
    assert queue.load_state_dict(saved, 3, keep=False) == [5, 6, 7, 4, 5]
    assert queue.batches == {} and queue.in_flight == {}
    policy.version = policy.revision = 3
    batch = queue.take(4, data_index)  # generated afresh, by the restored weights
    assert (batch.policy_version, batch.staleness) == (3, 0)
    queue.close()


def test_a_resume_with_a_smaller_max_staleness_keeps_only_what_it_allows():
    queue, _, policy = make_queue(2, total=8)
    _, data_index = train(queue, policy, range(1, 4))
    saved = queue.state_dict(3)
    queue.close()
    smaller, collector, policy = make_queue(1, total=8)
    policy.version = policy.revision = 3
    assert smaller.load_state_dict(saved, 3) == [5]
    assert sorted(smaller.batches) == [4]
    batch = smaller.take(4, data_index)
    assert batch.policy_version == 1 and batch.staleness == 2  # the kept batch, as generated
    assert [(step, start) for step, start, _, _ in collector.calls] == [(5, data_index + PER_STEP)]
    smaller.close()
