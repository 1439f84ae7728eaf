"""algo.mask_truncated through the command line on the tiny preset: the share of completions masked is logged
each step, and the run trains on the others (embedded engine, LoRA, a server engine); a step whose every completion
was cut off is skipped and said so. Two ranks against one process: test_distributed.py."""

from grpo import metric_keys as keys
from grpo.cli import main

from .helpers import metric_lines
from .test_server_engine import SGLANG

# The tiny model rarely samples its EOS: a completion ends where it writes one of these (status ok), and the
# others run to rollout.max_new_tokens (status truncated), a mix of both at every step of this seed.
ENDINGS = 'rollout.stop=["1","2","3"]'


def train(run_dir, *overrides: str) -> int:
    return main(["train", "--config", "tiny", "--run-dir", str(run_dir), "train.steps=3", "checkpoint.every_steps=0",
                 "rollout.max_new_tokens=4", *overrides])


def test_truncated_completions_are_masked_and_training_proceeds(tmp_path):
    assert train(tmp_path / "masked", "algo.mask_truncated=true", ENDINGS) == 0
    assert train(tmp_path / "kept", ENDINGS) == 0
    masked, kept = metric_lines(tmp_path / "masked"), metric_lines(tmp_path / "kept")
    assert len(masked) == 3
    for line in masked:  # every group is kept in this run, so the rows masked are the truncated answers
        assert line[keys.MASKED_TRUNCATED_FRAC] == line[keys.TRUNCATED_FRAC]
    assert all(0 < line[keys.MASKED_TRUNCATED_FRAC] < 1 and line[keys.APPLIED] == 1 for line in masked)
    assert all(keys.MASKED_TRUNCATED_FRAC not in line for line in kept)
    # The same first rollout (one seed): masked, fewer of its rows are computed, and the update still moves.
    assert masked[0][keys.TRUNCATED_FRAC] == kept[0][keys.TRUNCATED_FRAC]
    assert 0 < masked[0][keys.ROWS_COMPUTED] < kept[0][keys.ROWS_COMPUTED]
    assert masked[0][keys.GRAD_NORM] > 0


def test_a_step_whose_every_completion_is_truncated_is_skipped_explained_and_not_read_as_zero_loss(tmp_path, capsys):
    assert train(tmp_path / "r", "algo.mask_truncated=true", "rollout.max_new_tokens=2",
                 "guard.zero_loss.patience=1", "guard.zero_loss.action=stop") == 0
    lines = metric_lines(tmp_path / "r")
    assert [(line[keys.MASKED_TRUNCATED_FRAC], line[keys.APPLIED], line[keys.NO_SIGNAL], line[keys.TRIPS])
            for line in lines] == [(1.0, 0, 0, [])] * 3
    assert {line[keys.SKIP_REASON] for line in lines} == {"every completion truncated (algo.mask_truncated)"}
    assert all(keys.LOSS not in line for line in lines)
    said = capsys.readouterr()
    assert (said.out + said.err).count("every completion ran to rollout.max_new_tokens (2 tokens)") == 1


def test_lora_trains_on_the_completions_that_ended(tmp_path):
    assert train(tmp_path / "r", "algo.mask_truncated=true", ENDINGS, "model.lora.rank=4", "algo.kl_coef=0.05") == 0
    lines = metric_lines(tmp_path / "r")
    assert all(0 < line[keys.MASKED_TRUNCATED_FRAC] < 1 and line[keys.APPLIED] == 1 for line in lines)
    assert all(line[keys.ROWS_COMPUTED] == round(16 * (1 - line[keys.MASKED_TRUNCATED_FRAC])) for line in lines)


def test_a_server_engine_s_truncated_answers_are_masked_too(tmp_path):
    """The status comes from the rollout (the server's finish reason "length"), not from the embedded engine."""
    assert train(tmp_path / "r", "algo.mask_truncated=true", ENDINGS, "train.steps=2", *SGLANG) == 0
    lines = metric_lines(tmp_path / "r")
    assert all(line[keys.MASKED_TRUNCATED_FRAC] == line[keys.TRUNCATED_FRAC] for line in lines)
    assert all(0 < line[keys.MASKED_TRUNCATED_FRAC] < 1 and line[keys.APPLIED] == 1 for line in lines)
