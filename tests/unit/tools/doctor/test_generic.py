"""The generic reader (`grpo.tools.doctor.generic`) on the shapes other frameworks' and users' own loops print
their steps in. The lines are written here in those shapes (synthetic, not copied from a run); real logs are
in tests/data/real_runs, read by test_real_runs.py."""

from __future__ import annotations

import pytest

from grpo.tools.doctor import examine, generic, judge, textlog
from grpo.tools.doctor.record import (
    ACCURACY,
    ADVANTAGE_STD,
    CRITIC_GRAD_NORM,
    CRITIC_LOSS,
    ENTROPY,
    EVAL_ACCURACY,
    GRAD_NORM,
    KL,
    LENGTH,
    LOSS,
    REWARD,
    REWARD_STD,
    TRUNCATED,
    ZERO_VARIANCE,
    UnreadableRun,
)
from grpo.tools.watch import LogFollower, identify


def steps(*lines: str) -> list[generic.StepLine]:
    """The steps a reader fed these lines finds, once they have all come."""
    reader = generic.StepReader()
    found = [f for number, line in enumerate(lines, 1) for f in reader.feed(number, line)]
    return [f.step for f in found + reader.flush()]


def one(line: str) -> generic.StepLine:
    (found,) = steps(line)
    return found


@pytest.mark.parametrize("line, step, total, metrics", [
    ("step 12 | loss: 0.3120 | reward: 0.5200", 12, None, {LOSS: 0.312, REWARD: 0.52}),
    ("step: 12, loss: 0.31, reward: 0.52, lr: 1e-06", 12, None, {LOSS: 0.31, REWARD: 0.52}),
    ("Step 12/500 | reward: 0.5200 | seqlen 812.4 | grad_norm: 0.312", 12, 500,
     {REWARD: 0.52, LENGTH: 812.4, GRAD_NORM: 0.312}),
    ("[step 12] loss 0.3120, reward 0.5200", 12, None, {LOSS: 0.312, REWARD: 0.52}),
    ("global_step=12 train/loss=0.31 train/reward=0.52 train/lr=1e-06", 12, None, {LOSS: 0.31, REWARD: 0.52}),
    ("iter 12: loss 0.3120, reward 0.5200, time 81.23ms, mfu 41.20%", 12, None, {LOSS: 0.312, REWARD: 0.52}),
    ("Iteration 12 | policy_loss: 0.031 | avg_reward: 0.52 | kl_div: 0.0012", 12, None,
     {LOSS: 0.031, REWARD: 0.52, KL: 0.0012}),
    ("Episode 3 step 12: actor_loss=0.031, mean_reward=0.52, approx_kl=0.001", 12, None,
     {LOSS: 0.031, REWARD: 0.52, KL: 0.001}),
    ('{"step": 12, "train/reward": 0.52, "train/loss": 0.031, "lr": 1e-06, "epoch": 0}', 12, None,
     {REWARD: 0.52, LOSS: 0.031}),
    ("{'global_step': 12, 'rollout/score': 0.52, 'actor/kl': 0.01, 'actor/entropy': 0.91}", 12, None,
     {REWARD: 0.52, KL: 0.01, ENTROPY: 0.91}),
    ("2026-03-02 10:12:01 | INFO | Step 12/500 (2.40%) | Example step 3 | loss: 0.012000 | Average reward: 0.25",
     12, 500, {LOSS: 0.012, REWARD: 0.25}),
    ("step 00012/00500 (2.40%) | loss: 0.312000 | grad norm: 0.8123 | lrm: 1.00 | dt: 812.31ms | tok/sec: 12,345",
     12, 500, {LOSS: 0.312, GRAD_NORM: 0.8123}),
    ("step:12 - actor/pg_loss:0.031 - actor/kl_loss:np.float64(0.001) - critic/score/mean:0.41 - "
     "critic/score/std:0.2 - response_length/mean:812.3 - response_length/clip_ratio:0.05 - timing_s/step:45",
     12, None, {LOSS: 0.031, KL: 0.001, REWARD: 0.41, REWARD_STD: 0.2, LENGTH: 812.3, TRUNCATED: 0.05}),
    ("15:41:30 SUCCESS Step 9 | Time: 4.29s | Loss: 0.0012 | Entropy: 0.3571 | Mismatch KL: 0.0007 | "
     "Grad. Norm: 0.2154", 9, None, {LOSS: 0.0012, ENTROPY: 0.3571, GRAD_NORM: 0.2154}),
    ("step 12: {'train/loss': 0.31, 'train/entropy_loss': 0.9, 'train/grad_norm': 0.41, 'train/step': 12}", 12,
     None, {LOSS: 0.31, ENTROPY: 0.9, GRAD_NORM: 0.41}),
    ("step 12 | acc: 45.2% | loss: nan | reward_mean: 0.4", 12, None,
     {ACCURACY: 0.452, LOSS: float("nan"), REWARD: 0.4}),
    # slime's rollout line: the raw reward, not the group-normalised `rollout/rewards` beside it
    ("rollout 12: {'rollout/response_lengths': 812.5, 'rollout/rewards': 1.2e-09, 'rollout/truncated': 0.05, "
     "'rollout/raw_reward': 0.41, 'rollout/advantages': 0.0}", 12, None,
     {LENGTH: 812.5, REWARD: 0.41, TRUNCATED: 0.05}),
    ("Iter 12: Train loss 0.031, Total rewards mean 0.520, Total rewards std 0.250, Grouped rewards mean 0.520, "
     "Grouped rewards std 0.250, KL 0.001, Learning Rate 1.000e-05, It/sec 0.035, Peak mem 32.470 GB", 12, None,
     {LOSS: 0.031, REWARD: 0.52, REWARD_STD: 0.25, KL: 0.001}),
    ('{"loss": -0.0, "grad_norm": 0.0, "reward": 0.71, "reward_std": 0.13, "kl": NaN, '
     '"global_step/max_steps": "12/547", "elapsed_time": "5m 18s"}', 12, 547,
     {LOSS: 0.0, GRAD_NORM: 0.0, REWARD: 0.71, REWARD_STD: 0.13, KL: float("nan")}),
    # LLaMA-Factory's trainer_log.jsonl: the step as `current_steps`, the run's total as `total_steps`
    ('{"current_steps": 10, "total_steps": 1287, "loss": -0.1994, "eval_loss": null, "predict_loss": null, '
     '"reward": 0.13, "learning_rate": 9.998795309164754e-06, "epoch": 0.01, "percentage": 0.78}', 10, 1287,
     {LOSS: -0.1994, REWARD: 0.13}),
    # MiniMind's trainers: the step within its epoch, the run's step past the epochs before it
    ("Epoch:[2/3](150/9751), Reward: -1.8, KL_ref: 0.0004, Adv Std: 0.9257, Actor Loss: 0.0000, "
     "Avg Response Len: 212.50, Learning Rate: 0.00000030", 9751 + 150, 3 * 9751,
     {REWARD: -1.8, KL: 0.0004, ADVANTAGE_STD: 0.9257, LOSS: 0.0, LENGTH: 212.5}),
    # a loop whose unit is the epoch, its count opening the line
    ("  Epoch   3 | loss=-0.0402 | reward=  5.67 [-2.7 … 18.0]", 3, None, {LOSS: -0.0402, REWARD: 5.67}),
])
def test_each_step_shape_is_read_with_its_metrics(line, step, total, metrics):
    found = one(line)
    assert (found.step, found.total) == (step, total)
    assert found.metrics.keys() == metrics.keys()
    assert all(found.metrics[k] == pytest.approx(v, nan_ok=True) for k, v in metrics.items())


@pytest.mark.parametrize("line", [
    # a config dump: names of settings, not metrics, and no step
    "{'max_steps': 500, 'logging_steps': 1, 'learning_rate': 1e-06, 'max_grad_norm': 1.0, 'kl_coef': 0.04}",
    "trainer.total_training_steps=500 actor.kl_loss_coef=0.001 actor.entropy_coeff=0 data.max_response_length=1024",
    # ... and one with a step key, whose numbers are settings all the same
    "global_step: 0, lr: 1e-06, max_grad_norm: 1.0, warmup_ratio: 0.1, kl_coef: 0.04, entropy_coeff: 0.0",
    "lr: 1e-6 step 3",
    "step 5 | loss: 0.3 | lr: 1e-06 | time: 3.2s | throughput: 812 tok/s | epoch: 1",  # one metric only
    "Iteration 4:  40%|████      | 4/10 [00:31<00:47,  7.91s/it, loss=0.0312, reward=0.52]",  # a progress bar
    "Iteration: 100%|██████████| 8/8 [00:01<00:00,  6.21it/s]",
    "step 3 | reward_min: 0.0 | reward_max: 1.0 | loss_std: 0.1 | kl_max: 2.0",  # spreads, not the means
    "step 12 reward 0.5 loss 0.3",  # bare numbers outside a list of cells: too easily something else
    "Saving checkpoint at step 100 to /ckpt/global_step_100 (reward: 0.5)",
    "step 12.5 | loss: 0.3 | reward: 0.5",  # not a step count
    "rollout 3/8 done | loss: 0.3 | reward: 0.5",  # a rollout's progress, not slime's `rollout N:` line
    '{"total_steps": 1287, "loss": 0.3, "reward": 0.5}',  # the run's total, not a step
    "{'loss': 0.3, 'reward': 0.5, 'epoch': 2}",  # an HF Trainer dict's epoch is no step
    "Finished epoch 2: loss=0.3, reward=0.5",  # an epoch named inside the line, not opening it
])
def test_lines_that_are_not_a_steps_metrics_are_not_read(line):
    assert steps(line) == []


@pytest.mark.parametrize("name, canonical", [
    ("reward", REWARD), ("rewards", REWARD), ("score", REWARD), ("avg_reward", REWARD), ("mean_reward", REWARD),
    ("task_reward", REWARD), ("reward_mean", REWARD), ("Train/Reward", REWARD), ("critic/score/mean", REWARD),
    ("rollout/raw_reward", REWARD), ("acc", ACCURACY), ("accuracy", ACCURACY), ("correct", ACCURACY),
    ("pass@1", ACCURACY), ("loss", LOSS), ("policy_loss", LOSS), ("pg_loss", LOSS), ("actor_loss", LOSS),
    ("Training Loss", LOSS), ("grad_norm", GRAD_NORM), ("gradient_norm", GRAD_NORM), ("grad norm", GRAD_NORM),
    ("Grad. Norm", GRAD_NORM), ("kl", KL), ("kl_div", KL), ("approx_kl", KL), ("ref_kl", KL), ("actor/kl_loss", KL),
    ("entropy", ENTROPY), ("policy/entropy", ENTROPY), ("response_length", LENGTH), ("completion_length", LENGTH),
    ("gen_len", LENGTH), ("output_len", LENGTH), ("mean_length", LENGTH), ("completions/mean_length", LENGTH),
    ("reward_std", REWARD_STD), ("critic/score/std", REWARD_STD), ("frac_reward_zero_std", ZERO_VARIANCE),
    ("zero_std_ratio", ZERO_VARIANCE), ("completions/clipped_ratio", TRUNCATED), ("critic/vf_loss", CRITIC_LOSS),
    ("critic_loss", CRITIC_LOSS), ("critic/grad_norm", CRITIC_GRAD_NORM), ("Total rewards mean", REWARD),
    ("grouped_rewards_mean", REWARD), ("Grouped rewards std", REWARD_STD),
    ("lr", None), ("learning_rate", None), ("time", None), ("step_time", None), ("throughput", None),
    ("epoch", None), ("reward_min", None), ("reward_max", None), ("loss_std", None), ("max_grad_norm", None),
    ("kl_coef", None), ("Mismatch KL", None), ("eval_reward", EVAL_ACCURACY), ("eval_loss", None),
    ("val-core/gsm8k/reward/mean@1", EVAL_ACCURACY), ("eval/sampled/train/avg_score", EVAL_ACCURACY),
    ("actor/pg_clipfrac", None), ("prompt_length", None), ("num_tokens", None),
])
def test_metric_names_are_known_by_their_words(name, canonical):
    known = generic.canonical(name)
    assert (known[0] if known else None) == canonical


def test_an_evaluation_is_read_apart_from_trainings_numbers_and_alone_beside_a_step():
    """An evaluation's score is its own measure, never the training reward; a line that holds only evaluation
    scores is that step's evaluation, one number enough, as its name says what it is."""
    (found,) = steps("step 100 | eval/reward: 0.61 | val/accuracy: 0.55 | test_loss: 0.2")
    assert (found.step, found.metrics) == (100, {EVAL_ACCURACY: 0.55})
    (found,) = steps('WANDB_MIRROR kind=eval step=5 metrics={"eval/sampled/train/avg_score":0.62}')
    assert (found.step, found.metrics) == (5, {EVAL_ACCURACY: 0.62})
    assert steps("step 5 | avg_score_of_something: 0.62") == []


@pytest.mark.parametrize("evaluations, status", [((0.25, 0.62, 0.68), "healthy"), ((0.62, 0.40, 0.25), "unknown"),
                                                 ((0.62,), "unknown")])
def test_evaluations_that_held_are_the_evidence_where_no_training_reward_is_logged(tmp_path, evaluations, status):
    """A log whose training steps hold no reward the doctor can name: its evaluations, read at two points at least
    and ending no lower than they began, are the evidence that the run learns; falling ones are not."""
    lines = []
    for step in range(1, 11):
        lines.append(f"step {step} | loss: 0.3 | entropy: 0.8 | grad_norm: 0.4")
        if step % 5 == 0 or step == 1:
            at = (step == 1, step == 5, step == 10).index(True)
            if at < len(evaluations):
                lines.append(f"step {step} | eval/accuracy: {evaluations[at]}")
    lines.append("Training finished.")
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    assert examine(log)[0].status == status


def test_a_rising_reward_with_falling_evaluations_is_reward_hacking(tmp_path):
    """The training reward rising beyond its noise while the held-out evaluation ends below where it began:
    the policy learned the reward's proxy. Named from the first evaluation that fell, with the checkpoint saved
    before it; the same reward with evaluations that held is healthy."""
    def log(evaluations):
        lines = []
        for step in range(1, 41):
            lines.append(f"step {step} | loss: 0.3 | reward: {0.3 + 0.01 * step + 0.02 * (step % 3):.3f} | kl: 0.01")
            if step % 10 == 0:
                lines.append(f"Saved checkpoint to /ckpt/global_step_{step}")
                lines.append(f"step {step} | eval/accuracy: {evaluations[step // 10 - 1]}")
        lines.append("Training finished.")
        return _log(tmp_path, lines)

    diagnosis = examine(log((0.50, 0.52, 0.41, 0.30)))[0]
    assert (diagnosis.cause, diagnosis.first_bad_step) == ("reward_hacking", 30)
    assert diagnosis.last_good_checkpoint.endswith("global_step_20")
    assert examine(log((0.50, 0.52, 0.55, 0.58)))[0].status == "healthy"
    assert examine(log((0.50, 0.52, 0.55, 0.43)))[0].status == "healthy"  # one low evaluation at the end: noise


def test_a_long_run_at_its_reference_whose_reward_never_rose_is_a_policy_never_moved(tmp_path):
    """KL to the reference about 0 over a long run and a reward that never rose beyond its noise: the updates
    never moved the policy (a learning rate far too low). A short run, or one whose reward rose, is healthy."""
    def log(steps, rise):
        return _log(tmp_path, [f"step {s}/{steps} | loss: 0.0 | reward: {0.3 + rise * s + 0.1 * (s % 4):.4f} | "
                               f"kl: {0.0004 * (-1) ** s:.4f} | advantages_std: 0.92" for s in range(1, steps + 1)])

    diagnosis = examine(log(1200, 0.0))[0]
    assert (diagnosis.cause, diagnosis.first_bad_step) == ("policy_unmoved", 1)
    assert examine(log(1200, 0.0005))[0].status == "healthy"
    assert examine(log(400, 0.0))[0].status == "healthy"


def test_a_step_line_followed_by_its_metrics_table_is_one_step():
    found = steps("20260302-10:12:01.221 Stats INFO: Epoch 1/1 Step 3/50 Train step 3/50 done.",
                  "╒══════════════════════╤══════════╤══════════════════════╤══════════╕",
                  "│ actor/loss/avg       │ 0.031    │ actor/entropy/min    │ 0.0001   │",
                  "├──────────────────────┼──────────┼──────────────────────┼──────────┤",
                  "│ rollout/reward/avg   │ 0.52     │ actor/grad_norm      │ 0.41     │",
                  "╘══════════════════════╧══════════╧══════════════════════╧══════════╛",
                  "20260302-10:12:02.001 Rollout INFO: generating")
    assert [(s.step, s.total, s.metrics) for s in found] == [(3, 50, {LOSS: 0.031, REWARD: 0.52, GRAD_NORM: 0.41})]


def test_a_step_line_followed_by_a_pretty_printed_dict_is_one_step():
    found = steps("Step 7:", "{'train/loss': 0.031,", " 'train/reward': 0.52,", " 'train/kl': 0.002}", "Step 8:",
                  "{'train/loss': 0.029,", " 'train/reward': 0.55,", " 'train/kl': 0.002}")
    assert [(s.step, s.metrics[REWARD]) for s in found] == [(7, 0.52), (8, 0.55)]


def test_numbers_far_from_a_step_line_are_not_its_metrics():
    assert steps("lr: 1e-6 step 3", "Loading data", "Tokenizing", "Building the model", "Warming up",
                 "loss: 0.3", "reward: 0.5") == []


def test_a_table_with_a_step_column_is_read_a_row_a_step():
    found = steps("| Step | Training Loss | reward | reward_std | kl |", "|------|---------------|--------|-----|----|",
                  "| 1 | 0.000000 | 0.25 | 0.10 | 0.000 |", "| 2 | 0.001200 | 0.31 | 0.20 | 0.001 |",
                  "Training finished.", "| 3 | 0.5 | 0.5 | 0.5 | 0.5 |")
    assert [(s.step, s.metrics) for s in found] == [
        (1, {LOSS: 0.0, REWARD: 0.25, REWARD_STD: 0.1, KL: 0.0}),
        (2, {LOSS: 0.0012, REWARD: 0.31, REWARD_STD: 0.2, KL: 0.001})]


def test_a_table_aligned_by_spaces_is_read_a_row_a_step_past_its_left_out_rows():
    """pandas' print of a metrics frame (its index column dropped, `..` rows where it left rows out) and a
    user's own summary (`...` for the rows they cut) are tables too."""
    frame = steps("    step      loss  reward_mean  completions/clipped_ratio", "0      1  0.000000        0.000  1.0",
                  "1      2  0.001200        0.125  0.5", "..   ...       ...          ...  ...",
                  "9     10  0.003000        0.250  0.0", "[10 rows x 4 columns]")
    assert [(s.step, s.metrics) for s in frame] == [
        (1, {LOSS: 0.0, REWARD: 0.0, TRUNCATED: 1.0}), (2, {LOSS: 0.0012, REWARD: 0.125, TRUNCATED: 0.5}),
        (10, {LOSS: 0.003, REWARD: 0.25, TRUNCATED: 0.0})]
    summary = steps("Step  loss  grad_norm  reward  clipped_ratio", "1     0.1   0.5        0.2     0.9", "...",
                    "5     0.2   0.4        0.3     0.8")
    assert [(s.step, s.metrics[TRUNCATED]) for s in summary] == [(1, 0.9), (5, 0.8)]


def test_words_aligned_by_spaces_are_a_header_only_with_a_step_column_and_no_pairs():
    assert steps("epoch  loss  reward", "1      0.3   0.5") == []
    assert steps("step  loss  reward  note: warmup", "1     0.3   0.5") == []


def test_a_log_printed_as_a_list_of_its_lines_is_read_line_by_line(tmp_path):
    """A test's assertion message or `print(lines)` puts a log's lines in one physical line: each is its own,
    so each step keeps its own numbers; a config's short list and a dict's pairs stay one line."""
    lines = [f"12:00:0{s} SUCCESS Step {s} | loss: 0.{s} | reward: 0.{s + 1}" for s in range(1, 4)]
    log = _log(tmp_path, ["Starting run", repr(["", *lines, "12:00:04 INFO done"])])
    record = examine(log)[1]
    assert record.steps() == [1, 2, 3] and record.series(REWARD) == [(1, 0.2), (2, 0.3), (3, 0.4)]
    for line in ("target_modules=['q_proj', 'k_proj', 'v_proj']",
                 "[2024-08-02 01:25:00,501] [ERROR] [launch.py:325:sigkill_handler] ['python', '-u', '-m', "
                 "'openrlhf.cli.train_ppo'] exits with return code = 1",
                 "data.train_files=['/data/gsm8k/train_part_1.parquet', '/data/gsm8k/train_part_2.parquet', "
                 "'/data/gsm8k/train_part_3.parquet']"):
        assert textlog.listed_lines(line) == [line]
    dict_line = "{'loss': '0.0123', 'grad_norm': '0.5', 'reward': '0.25', 'epoch': '0.01'}"
    assert textlog.listed_lines(dict_line) == [dict_line]


def test_a_training_bars_count_is_progress_and_text_after_a_bar_is_read():
    reader = generic.StepReader()
    assert reader.feed(1, "Loading checkpoint shards: 100%|██████████| 4/4 [00:03<00:00,  1.21it/s]") == []
    assert reader.feed(2, "Epoch 1:  50%|█████     | 5/10 [00:03<00:03,  1.5it/s]") == []
    assert reader.progress == 0
    assert reader.feed(3, "Training Progress:  12%|█▏        | 60/500 [1:02:11<7:35:12, 62.07s/it]") == []
    (found,) = reader.feed(4, "Episode [1/20]:   1%|▏  | 61/7110 [15:49<894:10, 458.49s/it]step 61 | loss: 0.1 | "
                              "reward: 0.3")
    assert reader.progress == 61 and found.step.step == 61


def test_a_bar_of_the_datas_preparation_is_no_training_progress():
    reader = generic.StepReader()
    for number, line in enumerate([
            "Generating train split: 100%|██████████| 7473/7473 [00:00<00:00, 9682.99 examples/s]",
            "Map: 100%|██████████| 7473/7473 [00:00<00:00, 4680.63 examples/s]",
            "Train:   7%|▋         | 82/1218 [18:06:05<227:39:40, 721.46s/it]"], 1):
        reader.feed(number, line)
    assert reader.progress == 82


def test_the_raw_reward_ranks_over_a_shaped_one_on_the_same_line():
    assert one("step 3 | rewards: 0.0000 | raw_reward: 0.52 | loss: 0.1").metrics[REWARD] == 0.52
    assert one("step:3 - critic/score/mean:0.41 - critic/rewards/mean:0.39 - actor/pg_loss:0.1").metrics[REWARD] == 0.41


@pytest.mark.parametrize("line, said", [
    ("20251126-15:19:50.681 StatsLogger INFO: Training completes! Total time elapsed 383.23.", True),
    ("Training finished.", True), ("INFO: finished training in 3h", True), ("Training started", False),
    ("training data complete", False),
])
def test_the_runs_own_word_that_training_ended(line, said):
    assert generic.says_finished(line) is said


def _log(tmp_path, lines: list[str], name: str = "train.log"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(first: int, last: int, total: int = 40) -> list[str]:
    return [f"[2026-03-02 10:{s:02d}:00] step {s}/{total} | policy_loss: {0.02 - 0.001 * (s % 3):.4f} | "
            f"reward: {0.4 + 0.01 * (s % 5):.3f} | kl: 0.001 | lr: 1e-06" for s in range(first, last + 1)]


def test_a_crash_in_a_log_of_a_framework_without_a_reader_comes_after_its_steps(tmp_path):
    log = _log(tmp_path, ["[INFO] openrlhf.cli.train_ppo_ray: starting", *_run(1, 12),
                          "Traceback (most recent call last):",
                          '  File "/usr/local/lib/python3.10/site-packages/openrlhf/trainer/ppo_trainer.py", line 301',
                          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"])
    diagnosis, record = examine(log)
    assert record.source == "openrlhf" and record.steps() == list(range(1, 13)) and record.total_steps == 40
    assert (diagnosis.cause, diagnosis.first_bad_step) == ("out_of_memory", 13)


def test_a_checkpoint_a_log_says_it_saved_is_the_one_to_resume_from(tmp_path):
    """A save line naming the step's folder (verl's `local_global_step_folder:`, `Saving ... checkpoint-N`); a
    save that the crash interrupted is not a checkpoint before the first bad step, and a load is no save."""
    log = _log(tmp_path, [*_run(1, 10), "local_global_step_folder: /ckpt/run_1/global_step_10", *_run(11, 19),
                          "Loading checkpoint from /ckpt/run_0/checkpoint-15",
                          "Saving model checkpoint to /ckpt/run_1/checkpoint-20", "Traceback (most recent call last):",
                          '  File "/usr/lib/python3/dist-packages/torch/serialization.py", line 943, in save',
                          ("RuntimeError: [enforce fail at inline_container.cc:815] . PytorchStreamWriter failed "
                           "writing file data/7: file write failed")])
    diagnosis, record = examine(log)
    assert [(c.step, c.path) for c in record.checkpoints] == [(10, "/ckpt/run_1/global_step_10"),
                                                               (20, "/ckpt/run_1/checkpoint-20")]
    assert (diagnosis.cause, diagnosis.first_bad_step) == ("disk_full", 20)
    assert diagnosis.last_good_checkpoint == "/ckpt/run_1/global_step_10"


def test_a_log_of_an_unknown_loop_is_judged_on_its_steps(tmp_path):
    lines = _run(1, 6) + ["[2026-03-02 10:07:00] step 7/40 | policy_loss: nan | grad_norm: nan | reward: 0.41"]
    diagnosis, record = examine(_log(tmp_path, lines))
    assert record.source == "log" and (diagnosis.cause, diagnosis.first_bad_step) == ("nonfinite", 7)
    assert diagnosis.evidence[0].line == 7 and "step 7/40" in diagnosis.evidence[0].text


def test_a_log_that_stops_short_of_its_total_is_not_called_healthy(tmp_path):
    diagnosis, _ = examine(_log(tmp_path, _run(1, 12)))
    assert diagnosis.status == "unknown" and "stops at step 12 of 40" in diagnosis.explanation
    diagnosis, _ = examine(_log(tmp_path, _run(1, 40) + ["Training finished."]))
    assert diagnosis.status == "healthy"


@pytest.mark.parametrize("last, short", [(30, True), (38, False)])
def test_a_stretch_the_log_left_out_is_not_its_logging_interval(tmp_path, last, short):
    """Steps logged every 2 with a stretch left out before the last ones (a pasted log's "...", a resume): the
    interval is 2, so a log ending at 30 of 40 stops short, and one ending at 38 of 40 logged its last step."""
    lines = _run(1, 6)[1::2] + ["..."] + _run(last - 2, last)[::2]
    diagnosis, record = examine(_log(tmp_path, lines))
    assert record.steps() == [2, 4, 6, last - 2, last]
    assert (diagnosis.status == "unknown" and f"stops at step {last} of 40" in diagnosis.explanation) is short


def test_a_step_count_that_goes_back_is_a_new_attempt(tmp_path):
    _, record = examine(_log(tmp_path, _run(1, 8) + _run(5, 10)))
    assert record.steps() == list(range(1, 11)) and [m.step for m in record.marks if m.kind == "restart"] == [5]
    assert record.earlier and sorted(record.earlier[0][1]) == [5, 6, 7, 8]


def test_a_log_of_two_counts_is_no_restart_where_one_runs_ahead(tmp_path):
    """slime counts rollouts and updates apart (`rollout N`, `step M`): with two updates a rollout the update count
    runs ahead, which is no attempt starting over; both going back is one restart."""
    lines = []
    for rollout in range(4):
        lines.append(f"rollout {rollout}: {{'rollout/raw_reward': 0.{rollout + 3}, 'rollout/response_lengths': 800.0}}")
        lines += [f"step {2 * rollout + k}: {{'train/loss': 0.01, 'train/grad_norm': 0.2, 'train/kl_loss': 0.001}}"
                  for k in range(2)]
    _, record = examine(_log(tmp_path, lines))
    assert not [m for m in record.marks if m.kind == "restart"]
    _, record = examine(_log(tmp_path, lines + lines[:3]))
    assert [m.step for m in record.marks if m.kind == "restart"] == [0]


def test_a_log_without_a_step_the_doctor_can_read_is_still_refused(tmp_path):
    with pytest.raises(UnreadableRun, match="not a run directory or log the doctor knows"):
        examine(_log(tmp_path, ["lr: 1e-6 step 3", "Loading data", "done"]))


def test_the_watch_follows_a_generic_log_to_the_doctors_verdict(tmp_path):
    log = tmp_path / "train.log"
    lines = _run(1, 6) + ["[2026-03-02 10:07:00] step 7/40 | policy_loss: nan | grad_norm: nan | reward: 0.41"]
    log.write_text(lines[0] + "\n")
    follower = identify(log)
    assert isinstance(follower, LogFollower)
    with log.open("a") as f:
        f.write("\n".join(lines[1:]) + "\n")
    assert follower.poll()
    live, doctor = judge(follower.record(final=True)), examine(log)[0]
    assert (live.cause, live.first_bad_step) == ("nonfinite", 7) == (doctor.cause, doctor.first_bad_step)
