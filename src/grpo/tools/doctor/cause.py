"""The cause of a run's trouble, decided from its timeline: infrastructure before the model.

A dead server makes every reward 0 and every group identical, which looks like a collapse and like
no learning signal; so server evidence at (or just before) the first bad step wins. A reward that
fell while the servers were healthy is the model's doing. Order of the rules, first match wins:

    nonfinite            a NaN/inf loss, gradient or reward, first of all anomalies (or with the first)
    server_failure       the server died or could not be reached, from 3 steps before the first
                         model-side anomaly to one step after it (a server that died long after the
                         reward fell did not cause it; a stray connection error long before, with
                         healthy steps after it, did not either)
    rollout_failure      rollouts failed with no server evidence
    reward_broken        answers the reward could not score, or a reward function that raised
    reward_not_wired     the reward exactly 0 from the first logged step and never anything else: it never
                         scored an answer (its wiring, the answer format it expects), not a collapse
    truncation           completions ran to the length limit (clipped ratio near 1, having been low)
                         as the reward fell, or nearly all of them from the first step on while every group
                         scored alike (or the reward never scored): the budget, not the policy's skill, nor
                         the task's signal or the reward's wiring
    reward_source_died   the reward fell abruptly from a healthy level to exactly 0, identical in every
                         group, with no server evidence: what a dead reward server or inference server
                         looks like (every completion empty or an error, scored 0), after the groups'
                         rewards had varied; infrastructure until shown otherwise
    no_learning_signal   every group's rewards identical (loss and gradient at 0), a task that gives
                         no signal
    policy_collapse      the reward fell with the infrastructure healthy
    kl_drift             KL to the reference exploded while the reward stayed where it was
    reward_hacking       the training reward rose beyond its noise while the policy's held-out evaluations
                         fell: the policy games the reward's proxy, not the task
    policy_unmoved       a long run (1000 steps or more) whose KL to the reference stayed about 0 and whose
                         reward never rose beyond its noise: the updates never moved the policy
    out_of_memory, disk_full, nonfinite, gpu_failure, worker_failure, server_failure, reward_broken, crashed
                         the run ended in a crash after its last step (or before its first), classified
                         by what its traceback or fatal line says (`crashes`)
    stalled              the steps stopped: a trainer killed without a word, or no step at all (with
                         the failed samples of the step that never logged, when it recorded any); only a
                         grpo run's own record can tell: a console log with no step and no error is
                         `unknown` (copied before its first step, killed without a word, or no training log)

A model-side cause says so when the KL to the reference was already large at the run's first logged step:
the reference is not the model training started from, and the KL term pulls the policy toward it.

A run that finished is healthy when nothing but events marred it: the failures it recovered from and
its rollbacks (each with the learning-rate change it made) are named. Healthy needs evidence: a run
whose reward the doctor could not read at any step is `unknown`, never healthy (a NaN loss or
gradient is named all the same: it needs no reward; so is a loss and gradient exactly 0 at every step),
unless the policy's evaluations were read at two points at least and ended no lower than they began.
"""

from __future__ import annotations

import math
import statistics

from grpo.checks import CHECKS
from grpo.tools.doctor import crashes
from grpo.tools.doctor.record import (
    ACCURACY,
    CRITIC_GRAD_NORM,
    CRITIC_LOSS,
    EVAL_ACCURACY,
    GRAD_NORM,
    KL,
    LOSS,
    REWARD,
    REWARD_STD,
    TRUNCATED,
    ZERO_VARIANCE,
    Anomaly,
    Checkpoint,
    Crash,
    Evidence,
    RunRecord,
)

DISK_WORDS = ("no space", "quota", "read-only", "diskerror")
SERVER_SLACK = 1  # a server failure up to one step after the first bad step still explains it
SERVER_LEAD = 3  # ... and one up to 3 steps before it (rollouts in flight drain first); earlier ones
                 # were followed by healthy steps, so they did not cause it
# Anomalies that are trouble on their own; the rest (entropy, length, gradient spikes, step time,
# memory, restarts) are signs that explain them, or warnings on a run that is otherwise fine.
MODEL_SIDE = {"zero_reward", "reward_collapse", "zero_variance", "zero_loss", "failed_rollouts", "nonfinite",
              "unscorable_rewards"}
COLLAPSE_SIGNS = {"entropy_collapse": "entropy collapsing", "truncated_responses": "responses running to the length "
                  "limit", "grad_norm_spike": "gradient spikes", "kl_explosion": "KL exploding"}
CRASH_TEXT = {
    "out_of_memory": "ran out of memory", "disk_full": "the disk refused a write",
    "nonfinite": "the policy's numbers went NaN or infinite", "gpu_failure": "a CUDA or NCCL error",
    "reward_broken": "the reward function raised", "server_failure": "the inference engine died",
    "worker_failure": "a worker process died or could not start", "crashed": "an exception",
}
CRASH_ADVICE = {
    "out_of_memory": "lower the batch, the sequence lengths or the inference server's memory share (gpu memory "
                     "utilization / mem_fraction_static), or offload",
    "disk_full": "free space (old checkpoints), then run the same command again",
    "nonfinite": "resume from a checkpoint before it with a lower learning rate or a clipped gradient (and a KL or "
                 "ratio clamp); the steps before it, if logged, show where the NaN began (often the KL first)",
    "gpu_failure": "check the GPUs (nvidia-smi, Xid errors in dmesg) and the NCCL setup (NCCL_DEBUG=INFO); a "
                   "library built for another CUDA or GPU architecture fails the same way",
    "reward_broken": "fix the reward function for these inputs (its traceback names the line)",
    "server_failure": "read the inference server's own log for why it died",
    "worker_failure": "read the failed worker's own log (Ray: /tmp/ray/session_latest/logs) for why it died",
    "crashed": "fix what the traceback says",
}


def decide(record: RunRecord, timeline: list[Anomaly]) -> tuple[str, int | None, str, list[Anomaly]]:
    """-> (cause, first bad step, explanation, the anomalies that back it)."""
    what, step, text, backing = _decide(record, timeline)
    far = _reference_far(record) if what in MODEL_CAUSES else None
    return what, step, text + far if far else text, backing


def _decide(record: RunRecord, timeline: list[Anomaly]) -> tuple[str, int | None, str, list[Anomaly]]:
    by_kind: dict[str, list[Anomaly]] = {}
    for anomaly in timeline:
        by_kind.setdefault(anomaly.kind, []).append(anomaly)
    first = {kind: items[0] for kind, items in by_kind.items()}
    model_side = [a for a in timeline if a.kind in MODEL_SIDE]
    if record.source == "grpo" and record.finished and not any(not a.from_event for a in model_side):
        # Failed samples are counted apart: a stray empty answer at step 1 is not the failure to name.
        trouble = [a for a in timeline if a.from_event
                   and a.kind not in ("restart", "server_restart", "rollback", "samples_failed")]
        signs = [a for a in timeline if not a.from_event]  # e.g. entropy falling as the task is learned
        retried = sorted({a.step for a in _of(record, {"samples_failed"})})
        return "healthy", None, _healthy_text(record, signs) + (
            f"; recovered from {len(trouble)} failure(s) on the way (first: {_describe(trouble[0])} at step "
            f"{trouble[0].step})" if trouble else "") + (
            f"; failed samples retried at step(s) {', '.join(map(str, retried[:10]))}"
            + (" ..." if len(retried) > 10 else "") if retried else "") + "".join(
            f"; at step {a.step} {a.detail}" for a in timeline if a.kind == "rollback"), []
    onset = min((a.step for a in model_side), default=None)
    # Every occurrence, not the timeline's first of each burst: a stray connection error at step 5
    # must not hide the outage at step 42.
    servers = _of(record, {"server_failure", "server_gave_up", "server_unreachable"})
    errors = _of(record, {"rollout_error", "empty_responses"})

    last_step = max(record.steps(), default=0)
    last_evidence = record.evidence_by_step.get(last_step)
    last_line = last_evidence.line if last_evidence is not None and last_evidence.file == record.path else None
    crash = None if record.running else crashes.final(record.crashes, last_step, last_line if last_step else 0)
    if crash is not None and record.finished and record.total_steps and last_step >= record.total_steps \
            and crashes.WRAPPERS.search(crash.text):
        # The trainer printed its completion line after its last step: the launcher's "Killed" or
        # JobException as it stops the processes afterwards wraps no failure of the run's own.
        crash = None
    if crash is not None and not record.steps() and record.progress:
        # no step's metrics, but the progress bar's count: the crash came in the step after it
        crash = Crash(record.progress + 1, crash.kind, crash.text, crash.evidence)
    interrupted = crash is not None and crash.kind == "interrupted"
    if interrupted:
        crash = None  # stopped on purpose: judged by its steps
    if not any(REWARD in record.metrics[s] or ACCURACY in record.metrics[s] for s in record.steps()) \
            and record.source != "grpo" and crash is None and record.steps() \
            and not _loss_blew_up(record, first.get("nonfinite")) and not _never_updated(record) \
            and not _evaluations_held(record):
        return "unknown", None, _unknown_text(record), []
    if "nonfinite" in first and (onset is None or first["nonfinite"].step <= onset):
        a = first["nonfinite"]
        if _only_the_reward(record, a.step):
            return "reward_broken", a.step, (
                f"the reward was NaN or missing at step {a.step} ({a.detail}) while the loss and gradient were "
                "finite: a reward function returned NaN or None (TRL logs None's mean as NaN), not a numeric "
                "blow-up of the model. Make every reward function return a number for every completion"), [a]
        return "nonfinite", a.step, f"a non-finite value appeared at step {a.step}: {a.detail}", [a]
    # A mark a reader made of the crash's own line (verl marks any ActorDiedError) is that crash, not a
    # server death before it.
    own_line = (crash.evidence.file, crash.evidence.line) if crash is not None else None
    before_crash = [s for s in servers if crash is not None and s.step == crash.step
                    and (s.evidence is None or (s.evidence.file, s.evidence.line) != own_line)]
    if crash is not None and onset is None and not (crash.kind in ("crashed", "worker_failure") and before_crash):
        return _crash_cause(crash)  # what its traceback says, over the lines a reader marked on the way
    explaining = [s for s in servers if onset is None or onset - SERVER_LEAD <= s.step <= onset + SERVER_SLACK]
    if onset is None and _stopped_by(record, "server_gave_up"):
        # The failures of the step that never logged, ending in the stop: a failure in a step that
        # was logged was recovered from, however early it came.
        explaining = [s for s in explaining if s.step > max(record.metrics, default=0)]
    if explaining and not record.metrics and all(s.kind == "server_unreachable" for s in explaining):
        server = explaining[0]
        return "server_failure", server.step, (
            f"the trainer got no completion from its inference server ({server.detail}) and the log holds no step: "
            "without completions no step can run. Start the server before the trainer (TRL: `trl vllm-serve`), and "
            "check the host and port the trainer is given and that nothing (a proxy, an access rule) stands between "
            "them or refuses the requests"), explaining[:2]
    if explaining and (onset is not None or _stopped_by(record, "server_gave_up") or not record.metrics):
        server = explaining[0]
        step = min(server.step, onset) if onset is not None else server.step
        kinds_first = {}
        for s in explaining:
            kinds_first.setdefault(s.kind, s)  # the death, the first failure to reach it
        backing = list(kinds_first.values()) + ([_telling(model_side)] if model_side else [])
        after = f"; {_describe(_telling(model_side))} from step {onset}" if onset is not None else ""
        return "server_failure", step, (f"the inference server failed at step {server.step} ({server.detail}), so "
                                        f"rollouts failed{after}. This is the infrastructure, not the model: "
                                        "bring the server back (memory, restarts) and resume from before it"), backing
    late = [s for s in servers if onset is not None and s.step > onset + SERVER_SLACK]
    late_note = (f" (the server failure at step {late[0].step} came after, so it is not the cause)" if late else "")
    if "failed_rollouts" in first and first["failed_rollouts"].step == onset:
        a = first["failed_rollouts"]
        return "rollout_failure", a.step, (f"rollouts failed from step {a.step} ({a.detail}) with no sign of a "
                                           f"server failure{late_note}"), [a] + _near(errors, onset)[:2]
    near = _near(errors, onset)
    if near and onset is not None and _telling(model_side).kind in ("zero_reward", "reward_collapse", "zero_variance"):
        a = near[0]
        return "rollout_failure", min(a.step, onset), (
            f"rollout errors at step {a.step} ({a.detail}) as the reward fell ({_describe(_telling(model_side))}), "
            f"with no sign of a server failure{late_note}"), near[:3] + [_telling(model_side)]
    if "unscorable_rewards" in first and first["unscorable_rewards"].step == onset:
        a = first["unscorable_rewards"]
        return "reward_broken", a.step, (f"the reward could not score the answers from step {a.step} ({a.detail}): "
                                         "the gold answers or the reward function are at fault, not the model"), [a]
    signal = [first[k] for k in ("zero_variance", "zero_loss") if k in first]
    never = _never_scored(record, first)
    cut = _cut_off(record, never.step) if never is not None else None
    if cut is not None:
        return "truncation", cut.step, _cut_off_text(record, cut, "the reward was exactly 0 at every step"), [
            cut, never]
    if never is not None:
        return "reward_not_wired", never.step, (
            f"the mean reward was exactly 0 at every logged step from the first ({len(record.finite_series(REWARD))} "
            "steps): the reward function never scored a single answer, which is its wiring (the answer format it "
            "parses, the dataset's gold or data_source field, a reward never attached), not the model collapsing. "
            "Score a few of the completions by hand with the reward function to see which"), [never] + [
            a for a in signal if a.step == never.step]
    truncated = _truncation(record, first, onset)
    if truncated is not None:
        a, before, after = truncated
        return "truncation", a.step, (
            f"from step {a.step} {a.detail}, and the reward fell with it (mean {before:.3g} before, {after:.3g} "
            "after): answers cut off before they end score nothing. Raise the completion length limit, or reward "
            f"shorter answers, and resume from before step {a.step}{late_note}"), [a] + [
            x for x in model_side if x.step >= a.step][:2]
    died = _reward_source_died(record, first, onset)
    if died is not None:
        zero, before, mean_before = died
        step = zero.step
        return "reward_source_died", step, (
            f"the reward fell at step {step} from {before:.3g} (mean {mean_before:.3g} over the steps before) to "
            "exactly 0, identical in every group, after the groups' rewards had varied: what a dead reward "
            "source looks like (a reward server or the inference server failing, so every completion is empty "
            "or an error and scores 0), not a task without signal. Infrastructure until shown otherwise: "
            f"check the reward server's and the inference server's logs around step {step} and the completions "
            f"of step {step}; empty or error completions confirm it, real answers all scored 0 point at the "
            f"reward function instead. Bring the reward source back and resume from before step {step}"
            f"{late_note}"), [zero] + [a for a in signal if a.step == step]
    collapse = first.get("reward_collapse")
    kl = first.get("kl_explosion")
    if kl is not None and (onset is None or kl.step < onset) and _reward_flat(record, kl.step):
        return "kl_drift", kl.step, (
            f"KL to the reference exploded from step {kl.step} ({kl.detail}) while the reward stayed where it was: "
            "the policy drifts away from the reference without getting better at the task (often with gradient "
            "spikes). Raise the KL coefficient (beta), lower the learning rate, and resume from before step "
            f"{kl.step}{late_note}"), [kl] + [first[k] for k in ("grad_norm_spike",) if k in first]
    if signal and min(a.step for a in signal) == onset and not (collapse and collapse.step < onset):
        step = min(a.step for a in signal)
        backing = signal + [first[k] for k in ("reward_zero",) if k in first]
        cut = _cut_off(record, step)
        if cut is not None:
            return "truncation", step, _cut_off_text(record, cut, "every group's completions scored alike"), [
                cut] + signal
        spread = _groups_differ(record, step) if "zero_variance" not in first else None
        if spread is not None:
            return "no_learning_signal", step, (
                f"from step {step} the loss and the gradient are exactly 0 although the groups' rewards differ "
                f"({spread}): the advantages are not 0, yet no gradient reaches the weights, so nothing is learned"
                f"{late_note}. Not the task: check that the trained parameters require grad and reach the "
                "optimizer (adapters attached, nothing frozen or offloaded away) and the distributed setup "
                "(DeepSpeed's version and ZeRO stage: the same script on one node is the test)"), backing
        seen = ("every group's rewards are identical, so every advantage, the loss and the gradient are 0"
                if record.finite_series(REWARD) else "the loss and the gradient are exactly 0 (the log holds no "
                "reward; every advantage 0 is what makes them so)")
        return "no_learning_signal", step, (f"from step {step} {seen}: nothing is learned"
                                            f"{late_note}. More samples per group, a reward with partial credit, "
                                            "or problems of the right difficulty; a few groups' completions and "
                                            "rewards at that step confirm it (all right, or all wrong)"), backing
    if crash is not None and (onset is None or crash.step <= onset):
        return _crash_cause(crash)
    # A reward exactly 0 is a collapse only when it fell there: after a reward above 0 (from negative rewards,
    # a penalty the model learned to avoid, 0 is a rise; from the first step, it never scored).
    zero = first.get("zero_reward")
    fell = zero is not None and any(v > 0 for s, v in record.finite_series(REWARD) if s < zero.step)
    if collapse or fell:
        a = collapse or first["zero_reward"]
        signs = [first[k] for k in COLLAPSE_SIGNS if k in first]
        said = ", ".join(COLLAPSE_SIGNS[s.kind] + f" (step {s.step})" for s in signs) or "no other sign"
        # the collapse began at its first sign, when that came before the reward fell
        return "policy_collapse", min([a.step] + [s.step for s in signs]), (
            f"the reward collapsed at step {a.step} with the infrastructure healthy{late_note}: {said}. "
            "Lower the learning rate, raise the KL penalty or clip, and resume from before it"), [a] + signs
    if crash is not None:
        return _crash_cause(crash)
    recorded = [a for a in _of(record, {"crash"}) if a.step > last_step]  # not one a resume got past
    if recorded:
        a = recorded[-1]
        if any(s in a.detail.lower() for s in DISK_WORDS):
            return "disk_full", a.step, (f"the disk refused a write at step {a.step}: {a.detail}. Free space, "
                                         "then run the same command again"), [a]
        return "crashed", a.step, f"the trainer crashed at step {a.step}: {a.detail}", [a]
    # The samples of the step that never logged, which failed while it retried them: what it was doing.
    failing = [a for a in _of(record, {"samples_failed"}) if a.step > last_step]
    failed_text = "".join(f"; step {a.step}'s samples failed: {a.detail}" for a in failing[-2:])
    if not record.steps() and record.progress:
        return "unknown", None, (f"the run's progress reached step {record.progress}"
                                 + (f" of {record.total_steps}" if record.total_steps else "")
                                 + ", but the log holds no step's metrics (its logger wrote them elsewhere, e.g. "
                                   "to wandb or TensorBoard only): without the reward the doctor cannot say the run "
                                   "was healthy. Give the doctor the run's wandb directory (wandb/ or wandb/run-*) or "
                                   "its TensorBoard log directory, which it reads (in the log's directory they are read "
                                   "with it), or log to the console too (verl: trainer.logger=['console','wandb'])"), []
    if not record.steps() and interrupted:
        return "unknown", None, ("the run was stopped on purpose (an interrupt) before its first logged step: "
                                 "nothing went wrong in what it logged, and nothing was logged to judge"), []
    if not record.steps() and not record.running and record.console:
        return "unknown", None, _no_step_text(record) + failed_text, []
    if not record.steps() and not record.running:
        return "stalled", 1, "no step was logged: the run never got through its first step" + failed_text, (
            failing[-2:] + [a for a in timeline if a.kind in ("restart", "server_restart")])[:3]
    if _ended_without_a_word(record):
        last = record.steps()[-1] if record.steps() else 0
        return "stalled", last + 1, (f"the steps stopped after step {last}"
                                     + (f" of {record.total_steps}" if record.total_steps else "")
                                     + " with no error recorded (killed by SIGKILL, out of memory, or power loss?)"
                                     + failed_text), failing[-2:]
    short = _stops_short(record)
    if short is not None:
        return "unknown", None, short, []
    hacked = _evaluations_fell(record)
    if hacked is not None:
        step, before, after = hacked
        return "reward_hacking", step, (
            f"the training reward rose ({_rise_text(record)}) while the held-out evaluation fell from {before:.3g} "
            f"to {after:.3g} at step {step}: the policy learned what the reward pays for, not the task. Read the "
            "completions the reward scores highest for the shortcut (a format, a length, an answer the checker "
            "accepts wrongly), close it in the reward, and keep the last checkpoint whose evaluation held"), []
    if _unmoved(record):
        kl = [abs(v) for _, v in record.finite_series(KL)]
        steps = record.steps()
        return "policy_unmoved", steps[0], (
            f"over {steps[-1] - steps[0] + 1} steps the KL to the reference stayed about 0 (mean |KL| "
            f"{statistics.fmean(kl[len(kl) // 2:]):.2g} over the second half) and the reward never rose beyond "
            f"its noise ({_rise_text(record)}): the updates never moved the policy. The learning rate is far too "
            "low for this model, or the updates do not reach its weights (frozen or detached parameters, an "
            "optimizer over other tensors); a run of a few steps at 10x the learning rate shows which"), []
    warnings = [a for a in timeline if a.kind not in ("restart", "server_restart")]
    return "healthy", None, _healthy_text(record, warnings), []


ABRUPT = 0.5  # the step before the fall kept at least this fraction of the mean before it


def _reward_source_died(record: RunRecord, first: dict[str, Anomaly],
                        onset: int | None) -> tuple[Anomaly, float, float] | None:
    """(the reward-zero anomaly, the reward the step before it, the mean of the 5 before) when the
    reward fell at once to exactly 0 in every group after a task that gave signal, else None."""
    zero = first.get("zero_reward")
    if zero is None or zero.step != onset:
        return None
    logs_variance = any(name in record.metrics[s] for s in record.steps()
                        for name in (ZERO_VARIANCE, REWARD_STD, GRAD_NORM))
    rewards = record.finite_series(REWARD)
    zeros = [s for s, v in rewards if s >= onset]
    identical = all(record.metrics[s].get(ZERO_VARIANCE, 1.0) >= 0.999 and record.metrics[s].get(REWARD_STD, 0.0) == 0
                    and record.metrics[s].get(GRAD_NORM, 0.0) == 0 for s in zeros)
    if logs_variance and not identical:
        return None  # exactly 0 on average, but the groups still differ: not one dead source
    before = [v for s, v in rewards if s < onset][-5:]
    if len(before) < 3 or before[-1] <= 0 or before[-1] < ABRUPT * statistics.fmean(before):
        return None  # too few steps to have been healthy, or falling already: a collapse, not a death
    if any(v != 0 for s, v in rewards if s > onset):
        return None  # a dead source does not come back: a sparse reward does
    varied = [s for s in record.steps() if s < onset and (
        record.metrics[s].get(ZERO_VARIANCE, 1.0) < 0.999 or record.metrics[s].get(REWARD_STD, 0.0) > 0
        or record.metrics[s].get(GRAD_NORM, 0.0) > 0)]
    if logs_variance and not varied:
        return None  # never any signal: the task, not its source
    return zero, before[-1], statistics.fmean(before)


_TELLING = ("zero_reward", "reward_collapse", "failed_rollouts", "zero_variance", "zero_loss", "unscorable_rewards",
            "nonfinite")


def _loss_blew_up(record: RunRecord, anomaly: Anomaly | None) -> bool:
    """A NaN or infinite loss or gradient: trouble the doctor can name without reading any reward (a log
    torn before its reward keys, a framework whose reward it cannot read)."""
    values = record.metrics.get(anomaly.step, {}) if anomaly is not None else {}
    return any(not math.isfinite(values.get(name, 0.0)) for name in (LOSS, GRAD_NORM, CRITIC_LOSS, CRITIC_GRAD_NORM))


def _evaluations_held(record: RunRecord) -> bool:
    """The policy's evaluations, read at two points at least, ending no lower than they began: with no training
    reward in the log (a framework whose reward the doctor cannot name, a capture trimmed to other metrics), the
    evidence that the run learns. Evaluations that fell are no such evidence."""
    scores = record.finite_series(EVAL_ACCURACY)
    return len(scores) >= 2 and scores[-1][1] >= scores[0][1]


def _never_updated(record: RunRecord) -> bool:
    """The loss and the gradient norm exactly 0 at every logged step (two at least): nothing was learned, which
    the doctor can name without reading any reward (a trainer's log, whose rewards are in another process's)."""
    steps = record.steps()
    return len(steps) >= 2 and all(record.metrics[s].get(LOSS) == 0.0 and record.metrics[s].get(GRAD_NORM) == 0.0
                                   for s in steps)


def _groups_differ(record: RunRecord, step: int) -> str | None:
    """What shows the groups' rewards differing at `step` (their spread, or groups not all alike), or None."""
    values = record.metrics.get(step, {})
    if values.get(ZERO_VARIANCE, 1.0) < 1.0:
        return f"{1 - values[ZERO_VARIANCE]:.0%} of the groups not all alike"
    if values.get(REWARD_STD, 0.0) > 0.0:
        return f"reward_std {values[REWARD_STD]:.3g}"
    return None


def _only_the_reward(record: RunRecord, step: int) -> bool:
    values = record.metrics.get(step, {})
    bad = {name for name, v in values.items() if not math.isfinite(v)}
    return bool(bad) and bad <= {REWARD, REWARD_STD, ZERO_VARIANCE}


def _crash_cause(crash: crashes.Crash) -> tuple[str, int | None, str, list[Anomaly]]:
    when = "before its first step" if crash.step <= 1 else f"in step {crash.step}, after step {crash.step - 1}"
    backing = Anomaly(crash.step, "crash", crash.text, crash.evidence, from_event=True)
    return crash.kind, crash.step, (f"the run ended {when}: {CRASH_TEXT[crash.kind]} ({crash.text[:200]}). "
                                    f"{CRASH_ADVICE[crash.kind][0].upper()}{CRASH_ADVICE[crash.kind][1:]}"), [backing]


def _never_scored(record: RunRecord, first: dict[str, Anomaly]) -> Anomaly | None:
    """The zero_reward anomaly when the reward was exactly 0 from the first logged step to the last."""
    zero = first.get("zero_reward")
    rewards = record.finite_series(REWARD)
    if zero is None or not rewards or zero.step != rewards[0][0] or any(v != 0 for _, v in rewards):
        return None
    return zero


def _truncation(record: RunRecord, first: dict[str, Anomaly], onset: int | None):
    """(the truncated_responses anomaly, mean reward before, after) when completions ran to the length
    limit and the reward fell with them (a budget that cuts answers off); else None."""
    a = first.get("truncated_responses")
    if a is None or (onset is not None and onset < a.step - 1):
        return None
    rewards = record.finite_series(REWARD)
    before = [v for s, v in rewards if s < a.step]
    after = [v for s, v in rewards if s >= a.step]
    if not before or not after:
        return None
    mean_before, mean_after = statistics.fmean(before[-5:]), statistics.fmean(after[:5])
    if mean_after >= mean_before - 0.3 * abs(mean_before) or mean_before <= 0:
        return None
    return a, mean_before, mean_after


def _cut_off(record: RunRecord, step: int) -> Anomaly | None:
    """An anomaly naming the length limit when nearly every completion ran to it at `step` and at most of the
    logged steps after it. Answers cut off before they end all score alike (nothing, or the same partial
    credit): a budget too small for the task reads as groups without signal or as a reward never wired."""
    series = [(s, v) for s, v in record.finite_series(TRUNCATED) if s >= step]
    limit = CHECKS["truncated_responses"].threshold
    if not series or series[0][0] != step or series[0][1] < limit or statistics.median(v for _, v in series) < limit:
        return None
    return Anomaly(step, "truncated_responses", f"{series[0][1]:.0%} of responses ran to the length limit "
                   f"(median {statistics.median(v for _, v in series):.0%} from there on)",
                   record.evidence_by_step.get(step))


def _cut_off_text(record: RunRecord, cut: Anomaly, alike: str) -> str:
    rewards = [v for s, v in record.finite_series(REWARD) if s >= cut.step]
    scored = f" (mean reward {statistics.fmean(rewards):.3g})" if rewards else ""
    return (f"from step {cut.step} {cut.detail} and {alike}{scored}: answers cut off before they end all score "
            "the same, so there is no signal to learn from. The length budget, not the task or the reward's wiring: "
            "raise the completion length limit (or ask for shorter answers) and start again")


# KL per token at a run's first logged step no fresh policy reaches: it started elsewhere than its reference.
REFERENCE_FAR = 1.0
MODEL_CAUSES = ("truncation", "no_learning_signal", "policy_collapse", "reward_not_wired", "kl_drift", "reward_hacking",
                "policy_unmoved")
UNMOVED_SPAN = 1000  # steps: a shorter run may not have had the time to move
UNMOVED_KL = 0.01  # mean |KL| per token to the reference: a policy this close to it has not left it
HACKED_FALL = 0.10  # the evaluations' fall, as a fraction of the first score, that is more than their noise


def _quarters(record: RunRecord) -> tuple[list[float], list[float]] | None:
    """The reward over the first and the last quarter of its logged steps (8 steps at least in all)."""
    rewards = [v for _, v in record.finite_series(REWARD)]
    if len(rewards) < 8:
        return None
    quarter = len(rewards) // 4
    return rewards[:quarter], rewards[-quarter:]


def _rose(record: RunRecord) -> bool | None:
    """Whether the reward's last quarter is above its first by more than twice their difference's standard
    error (None: too few steps to say)."""
    quarters = _quarters(record)
    if quarters is None:
        return None
    first, last = quarters
    noise = math.sqrt(statistics.pvariance(first) / len(first) + statistics.pvariance(last) / len(last))
    return statistics.fmean(last) > statistics.fmean(first) + 2 * noise


def _rise_text(record: RunRecord) -> str:
    first, last = _quarters(record)
    return (f"mean {statistics.fmean(first):.3g} over the first quarter of its steps, {statistics.fmean(last):.3g} "
            "over the last")


def _evaluations_fell(record: RunRecord) -> tuple[int, float, float] | None:
    """(the first evaluation after the start below the first one, the first score, the last) when the training
    reward rose while the evaluations ended lower than they began: three evaluations at least and the last two
    both below the first by HACKED_FALL of it, so one noisy evaluation (a 128-problem accuracy moves by 4
    points from one draw to the next) is not taken for a trend; else None."""
    scores = record.finite_series(EVAL_ACCURACY)
    if len(scores) < 3 or not _rose(record):
        return None
    start = scores[0][1]
    below = start - HACKED_FALL * max(abs(start), 1e-9)
    if not (scores[-1][1] < below and scores[-2][1] < below):
        return None
    fell = next(s for s, v in scores[1:] if v < below)
    return fell, start, scores[-1][1]


def _unmoved(record: RunRecord) -> bool:
    """A run of UNMOVED_SPAN steps or more whose KL to the reference stayed under UNMOVED_KL over its second half
    and whose reward did not rise: the evidence of updates that never moved the policy."""
    steps, kl = record.steps(), [abs(v) for _, v in record.finite_series(KL)]
    if not steps or steps[-1] - steps[0] + 1 < UNMOVED_SPAN or len(kl) < 8:
        return False
    return statistics.fmean(kl[len(kl) // 2:]) < UNMOVED_KL and _rose(record) is False


def _reference_far(record: RunRecord) -> str | None:
    """The note that the KL to the reference was already large at the run's first logged step (not a resumed
    attempt's), or None."""
    steps = record.steps()
    if not steps or record.earlier or KL not in record.metrics[steps[0]]:
        return None
    kl = record.metrics[steps[0]][KL]
    if not math.isfinite(kl) or kl < REFERENCE_FAR:
        return None
    return (f". The KL to the reference was already {kl:.4g} at the first logged step ({steps[0]}): the reference is "
            "not the model training started from (e.g. the base model under an SFT adapter, as TRL and PEFT take "
            "it), so the KL term pulls the policy back toward it; give the trainer the starting model as its "
            "reference, or set the KL coefficient to 0")


def _reward_flat(record: RunRecord, step: int) -> bool:
    """The reward from `step` on is not better than before it (within its own noise)."""
    rewards = record.finite_series(REWARD)
    before = [v for s, v in rewards if s < step]
    after = [v for s, v in rewards if s >= step]
    if len(before) < 3 or not after:
        return not before  # no reward to compare: KL alone
    level = statistics.fmean(before)
    return statistics.fmean(after) <= level + max(2 * statistics.pstdev(before), 0.1 * abs(level))


def _unknown_text(record: RunRecord) -> str:
    steps = record.steps()
    read = sorted({name for s in steps for name in record.metrics[s]} - {"eval_accuracy"})
    return (f"{len(steps)} step(s) logged ({steps[0]}-{steps[-1]}), but no reward was read at any of them"
            + (f" (only {', '.join(read[:6])})" if read else "") + ": without the reward the doctor cannot say the "
            "run was healthy. Check that the log holds the reward (a framework's metric names change between "
            "versions)")


def _telling(anomalies: list[Anomaly]) -> Anomaly:
    """Of the anomalies at the first bad step, the one a person would name (the reward over the loss)."""
    onset = min(a.step for a in anomalies)
    at_onset = [a for a in anomalies if a.step == onset]
    return min(at_onset, key=lambda a: _TELLING.index(a.kind) if a.kind in _TELLING else len(_TELLING))


def _describe(a: Anomaly) -> str:
    return f"{a.kind.replace('_', ' ')} ({a.detail})"


def _of(record: RunRecord, kinds: set[str]) -> list[Anomaly]:
    """The record's marks of these kinds, by step; at one step, the server's own death before the
    trainer's failure to reach it."""
    return sorted((Anomaly(m.step, m.kind, m.detail, m.evidence, from_event=True) for m in record.marks
                   if m.kind in kinds), key=lambda a: (a.step, a.kind == "server_unreachable"))


def _near(errors: list[Anomaly], onset: int | None) -> list[Anomaly]:
    """Rollout errors from a step before the first bad step to just after it."""
    if onset is None:
        return []
    return [e for e in errors if onset - 1 <= e.step <= onset + SERVER_SLACK]


def _stopped_by(record: RunRecord, kind: str) -> bool:
    return any(m.kind == kind for m in record.marks)


def _ended_without_a_word(record: RunRecord) -> bool:
    """Only a grpo run can tell: it writes summary.json when it finishes and its own stop reports."""
    ended_on_purpose = any(m.kind in ("stop", "interrupted") for m in record.marks)
    return (record.source == "grpo" and not record.finished and bool(record.metrics) and record.total_steps is not None
            and max(record.metrics) < record.total_steps and not ended_on_purpose and not record.running)


def _no_step_text(record: RunRecord) -> str:
    """Why a console log with no step and no error is not called stalled: a log copied before its first logged
    step, a process killed without a word before it, and a log that is not of training (an evaluation, a data
    preparation) read the same from the file alone; only a grpo run's own record knows its trainer is gone."""
    if record.finished:
        return ("the trainer printed its final line, but the log holds no step's metrics (a logging interval longer "
                "than the run, or a logger that wrote them elsewhere): nothing to judge the run by. Give the doctor "
                "its trainer_state.json, wandb or TensorBoard directory, or log more often")
    return ("the log holds no training step and no error: it was copied before the first step was logged, or the "
            "process was killed without a word before it (the OOM killer or another SIGKILL, a scheduler's time "
            "limit), or it is not a training log (an evaluation, a data preparation). Check whether the process is "
            "alive; if not, read the kernel log (dmesg) and the scheduler's record for it")


def _stops_short(record: RunRecord) -> str | None:
    """Why a console log that ends long before the run's own total, with no final line and no error, is
    not healthy: from the log alone it was either still running when copied, or killed without a word
    (the OOM killer's SIGKILL, a lost node, a scheduler's time limit), and a dead run looks exactly so."""
    steps = record.steps()
    if not (record.console and steps and record.total_steps and not record.finished and not record.running):
        return None
    last, gaps = steps[-1], sorted(b - a for a, b in zip(steps[-4:], steps[-3:]))
    # the logging interval is the usual gap between the last steps, not the largest: a stretch the log left
    # out (a resume, a pasted log's "...") is not an interval
    if last + (gaps[(len(gaps) - 1) // 2] if gaps else 1) >= record.total_steps:
        return None  # its last logged step is the last there was to log
    return (f"the log stops at step {last} of {record.total_steps} with no final line (no train_runtime, no "
            "'training completes', no final save) and no error: the run was still going when the log was "
            "copied, or it was killed without a word (the OOM killer or another SIGKILL, a lost node, a "
            "scheduler's time limit). Check whether the process is alive; if not, read the kernel log (dmesg) "
            f"and the scheduler's record for it. Steps 1-{last} showed no problem; read {_read(record)}")


def _healthy_text(record: RunRecord, worth_a_look: list[Anomaly]) -> str:
    steps = record.steps()
    if not steps:
        return "no step was logged yet"
    span = f"steps {steps[0]}-{steps[-1]}" + (f" of {record.total_steps}" if record.total_steps else "")
    looks = ", ".join(f"{_describe(a)} at step {a.step}" for a in worth_a_look[:3])
    return (f"{span}: " + (f"no problem; worth a look: {looks}" if worth_a_look else "no anomaly")
            + ("" if record.finished or record.source != "grpo" else " (not finished)") + f"; read {_read(record)}")


def _read(record: RunRecord) -> str:
    """What the verdict rests on: the reward's range and which other measures were read, over how many steps."""
    rewards = [v for _, v in record.finite_series(REWARD)]
    said = [f"the reward at {len(rewards)} step(s) ({min(rewards):.3g} to {max(rewards):.3g})"] if rewards else []
    evaluations = record.finite_series(EVAL_ACCURACY)
    said += [f"the evaluation score at {len(evaluations)} evaluation(s) ({evaluations[0][1]:.3g} at step "
             f"{evaluations[0][0]} to {evaluations[-1][1]:.3g} at step {evaluations[-1][0]})"] if evaluations else []
    said += [f"{name} at {n}" for name in (LOSS, GRAD_NORM, KL, ZERO_VARIANCE, TRUNCATED)
             if (n := len(record.series(name)))]
    return ", ".join(said) or "no quality metric"


def last_checkpoint_before(record: RunRecord, step: int | None) -> Checkpoint | None:
    """The newest healthy checkpoint saved before `step` ran (any, when there is no bad step)."""
    usable = [c for c in record.checkpoints if c.healthy and (step is None or c.step < step)]
    return usable[-1] if usable else None


def evidence_of(backing: list[Anomaly]) -> list[Evidence]:
    seen, out = set(), []
    for a in backing:
        if a.evidence is not None and (a.evidence.file, a.evidence.line) not in seen:
            seen.add((a.evidence.file, a.evidence.line))
            out.append(a.evidence)
    return out
