"""grpo's objective against TRL's own code on one fixed batch (marked `trl`: TRL's environment, built by
scripts/setup_trl_env.sh, runs tests/integration/trl_parity_side.py).

The same tiny model (saved once, loaded by each side its own way) and the same batch: prompt and
completion ids of several lengths (left- and right-padded), rewards, old log-probs off the current
policy (so ratios leave the clip range), reference log-probs, and truncated importance weights. grpo's
side is its real update path (grpo's model loader with its CPU attention, `collate`, the shared-prompt
forward, the chunked head, `policy_loss`); TRL's is `GRPOTrainer._compute_loss`. The loss and every
parameter's gradient must agree within 1e-5 (fp32) for each objective the two share:

    grpo algo.*                                         TRL 1.16 GRPOConfig
    loss_agg=seq_mean                                   loss_type=grpo
    loss_agg=token_mean                                 loss_type=bnpo, and loss_type=dapo
    loss_agg=seq_sum_norm (Dr.GRPO's constant)          loss_type=dr_grpo (max_completion_length)
    clip_low=0.2 clip_high=0.28 (clip-higher)           epsilon=0.2 epsilon_high=0.28
    kl_coef=0.04 kl_estimator=k3                        beta=0.04, use_bias_correction_kl=False
    rollout.temperature=0.7                             temperature=0.7
    off-policy importance weights (truncated)           importance_sampling_ratio (vLLM correction)
    ratio_level=sequence (GSPO), clip 3e-4/4e-4         importance_sampling_level=sequence, epsilon=3e-4,
      and 0.1/0.1; with seq_mean, token_mean, a KL        epsilon_high=4e-4 (and 0.1); loss_type=grpo, bnpo,
      term, importance weights                            beta, importance_sampling_ratio

Advantages come from TRL's own scoring path (`_generate_and_score_completions` over fixed rollouts).
They differ on purpose in one way, asserted exactly here: grpo divides by the population standard
deviation (+1e-6), TRL by the sample standard deviation (+1e-4), so for a group of G TRL's advantages
are grpo's times sqrt((G-1)/G) (0.87 for G=4), up to the epsilons. The factor is the same for every
group of that size (`advantage_norm=batch`: for the batch), and Adam's update is invariant to a
constant scale of the loss, so it changes no step (docs/trl-parity.md); `advantage_std=sample` with
`advantage_eps=1e-4` gives TRL's exactly. `advantage_norm=none` (Dr.GRPO) is identical. grpo's k1 KL estimator has no TRL counterpart. TRL 1.16's default
`use_bias_correction_kl=True` multiplies the KL term by the ratio pi/pi_old (DeepSeek-V3.2's unbiased
reverse-KL gradient); grpo's penalty is GRPO's (DeepSeekMath) as written, so the KL case sets it off.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from grpo import metric_keys as keys
from grpo.algo.advantages import group_advantages
from grpo.algo.loss import BatchTotals, LossConfig, policy_loss
from grpo.config import ModelConfig, TinyModelConfig
from grpo.policy.models import build_char_tokenizer, build_tiny_model, load_model_and_tokenizer
from grpo.policy.update import TrainBatch, collate, completion_logprobs

TRL_PYTHON = Path(os.environ.get("GRPO_TRL_PYTHON", Path(__file__).resolve().parents[2] / ".venv-trl/bin/python"))
TRL_SIDE = Path(__file__).with_name("trl_parity_side.py")

pytestmark = [
    pytest.mark.trl,
    pytest.mark.skipif(not TRL_PYTHON.is_file(), reason=f"no TRL environment at {TRL_PYTHON} "
                       "(scripts/setup_trl_env.sh builds it)"),
]

GROUPS, GROUP_SIZE, MAX_NEW_TOKENS = 2, 4, 12
REWARDS = [1.0, 0.0, 0.5, 1.0, 0.0, 0.2, 1.0, 0.0]

# GSPO as the paper and TRL's documentation set it: a sequence-level ratio clipped to [1 - 3e-4, 1 + 4e-4].
GSPO = dict(ratio_level="sequence", clip_low=3e-4, clip_high=4e-4)
TRL_GSPO = dict(importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4)

# name: (grpo's LossConfig and temperature, TRL's GRPOConfig arguments, importance weights used)
CASES = {
    "seq_mean (GRPO)": (dict(loss_agg="seq_mean"), 1.0, dict(loss_type="grpo", epsilon=0.2), False),
    "token_mean (BNPO)": (dict(loss_agg="token_mean"), 1.0, dict(loss_type="bnpo", epsilon=0.2), False),
    "token_mean (DAPO)": (dict(loss_agg="token_mean"), 1.0, dict(loss_type="dapo", epsilon=0.2), False),
    "seq_sum_norm (Dr.GRPO)": (dict(loss_agg="seq_sum_norm", max_new_tokens=MAX_NEW_TOKENS), 1.0,
                               dict(loss_type="dr_grpo", epsilon=0.2), False),
    "clip-higher 0.2/0.28": (dict(loss_agg="token_mean", clip_low=0.2, clip_high=0.28), 1.0,
                             dict(loss_type="dapo", epsilon=0.2, epsilon_high=0.28), False),
    "KL k3, beta 0.04": (dict(loss_agg="seq_mean", kl_coef=0.04, kl_estimator="k3"), 1.0,
                         dict(loss_type="grpo", epsilon=0.2, beta=0.04, use_bias_correction_kl=False), False),
    "temperature 0.7": (dict(loss_agg="seq_mean"), 0.7, dict(loss_type="grpo", epsilon=0.2, temperature=0.7), False),
    "importance weights": (dict(loss_agg="token_mean"), 1.0, dict(loss_type="dapo", epsilon=0.2), True),
    "GSPO 3e-4/4e-4": (dict(GSPO, loss_agg="seq_mean"), 1.0, dict(TRL_GSPO, loss_type="grpo"), False),
    "GSPO clip 0.1": (dict(GSPO, loss_agg="seq_mean", clip_low=0.1, clip_high=0.1), 1.0,
                      dict(TRL_GSPO, loss_type="grpo", epsilon=0.1, epsilon_high=0.1), False),
    "GSPO KL k3, beta 0.04": (dict(GSPO, loss_agg="seq_mean", kl_coef=0.04, kl_estimator="k3"), 1.0,
                              dict(TRL_GSPO, loss_type="grpo", beta=0.04, use_bias_correction_kl=False), False),
    "GSPO token_mean (BNPO)": (dict(GSPO, loss_agg="token_mean"), 1.0, dict(TRL_GSPO, loss_type="bnpo"), False),
    "GSPO importance weights": (dict(GSPO, loss_agg="seq_mean"), 1.0, dict(TRL_GSPO, loss_type="grpo"), True),
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The saved model, the batch, and TRL's results for every case (one subprocess)."""
    root = tmp_path_factory.mktemp("parity")
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(TinyModelConfig(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128),
                             tokenizer, torch.float32)
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")

    vocab, pad = len(tokenizer), tokenizer.pad_token_id
    draw = lambda n: torch.randint(4, vocab, (n,)).tolist()  # noqa: E731  (no special tokens)
    prompts = [draw(5), draw(9)]
    completion_lens = [12, 3, 7, 10, 1, 12, 6, 9]
    rows = GROUPS * GROUP_SIZE
    train = TrainBatch(
        prompt_ids=[prompts[r // GROUP_SIZE] for r in range(rows)],
        completion_ids=[draw(n) for n in completion_lens],
        old_logprobs=[[0.0] * n for n in completion_lens],
        advantages=group_advantages(torch.tensor(REWARDS).view(GROUPS, GROUP_SIZE), "group").flatten(),
        gradient_rows=list(range(rows)),  # the loss is compared over every row
    )
    mb = collate(train, list(range(rows)), pad, torch.device("cpu"))
    with torch.no_grad():
        current, _ = completion_logprobs(model, mb, 1.0)  # [B, T]
    mask = mb.completion_mask  # [B, T]
    # Old and reference log-probs off the current policy by up to +-0.4 nats per token: many ratios
    # leave [0.8, 1.28], so both clip sides bind on some tokens.
    old = (current + (torch.rand_like(current) - 0.5) * 0.8) * mask
    ref = (current + (torch.rand_like(current) - 0.5) * 0.8) * mask
    weights = (0.5 + torch.rand_like(current)).clamp(max=1.3) * mask
    batch = {
        "prompt_ids": mb.prompt_ids[mb.prompt_index], "prompt_mask": mb.prompt_mask[mb.prompt_index],
        "completion_ids": mb.completion_ids, "completion_mask": mask.long(), "rewards": torch.tensor(REWARDS),
        "advantages": mb.advantages, "old_logprobs": old, "ref_logprobs": ref, "importance_weights": weights,
    }
    torch.save(batch, root / "batch.pt")
    spec = {
        "model_dir": str(root / "model"), "batch": str(root / "batch.pt"), "out": str(root / "trl.pt"),
        "out_dir": str(root / "trl_out"), "group_size": GROUP_SIZE, "max_completion_length": MAX_NEW_TOKENS,
        "advantage_cases": {norm: {"scale_rewards": norm} for norm in ("group", "batch", "none")},
        "loss_cases": [{"name": name, "args": args, "importance_sampling": weighted}
                       for name, (_, _, args, weighted) in CASES.items()],
    }
    (root / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
    done = subprocess.run([str(TRL_PYTHON), str(TRL_SIDE), str(root / "spec.json")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return root, train, batch, torch.load(root / "trl.pt")


def grpo_loss_and_grads(root: Path, train: TrainBatch, batch: dict, loss_kwargs: dict, temperature: float,
                        weighted: bool) -> tuple[float, dict[str, torch.Tensor], dict[str, float]]:
    model, tokenizer = load_model_and_tokenizer(ModelConfig(name=str(root / "model"), dtype="float32"),
                                                torch.device("cpu"))
    model.train()
    mask = batch["completion_mask"]
    lengths = mask.sum(1).tolist()
    train = TrainBatch(
        prompt_ids=train.prompt_ids, completion_ids=train.completion_ids,
        old_logprobs=[batch["old_logprobs"][r, :n].tolist() for r, n in enumerate(lengths)],
        advantages=batch["advantages"], gradient_rows=train.gradient_rows,
        ref_logprobs=[batch["ref_logprobs"][r, :n] for r, n in enumerate(lengths)],
        importance_weights=[batch["importance_weights"][r, :n] for r, n in enumerate(lengths)] if weighted else None,
    )
    mb = collate(train, list(range(len(train))), tokenizer.pad_token_id, torch.device("cpu"))
    logprobs, _ = completion_logprobs(model, mb, temperature)
    totals = BatchTotals(num_tokens=train.num_tokens, num_sequences=len(train))
    loss, metrics = policy_loss(logprobs, mb.old_logprobs, mb.advantages, mb.completion_mask,
                                LossConfig(**loss_kwargs), totals, mb.ref_logprobs, mb.importance_weights)
    loss.backward()
    return loss.item(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}, metrics


@pytest.mark.parametrize("case", list(CASES))
def test_loss_and_every_gradient_equal_trls(setup, case):
    root, train, batch, trl = setup
    loss_kwargs, temperature, _, weighted = CASES[case]
    loss, grads, metrics = grpo_loss_and_grads(root, train, batch, loss_kwargs, temperature, weighted)
    trl_loss, trl_grads = trl["losses"][case]
    assert abs(loss) > 1e-4  # a loss of 0 would compare nothing
    # The clip binds on both sides somewhere in this batch, or the clip would go untested.
    assert metrics[keys.CLIP_LOW_FRAC] > 0 and metrics[keys.CLIP_HIGH_FRAC] > 0, metrics
    assert abs(loss - trl_loss) < 1e-5, (loss, trl_loss)
    assert grads.keys() == trl_grads.keys()
    worst = max((grads[n] - trl_grads[n]).abs().max().item() for n in grads)
    scale = max(g.abs().max().item() for g in grads.values())
    print(f"{case}: loss {loss:.6f} vs TRL {trl_loss:.6f} (|diff| {abs(loss - trl_loss):.1e}), "
          f"largest gradient difference {worst:.1e} (largest gradient {scale:.1e})")
    assert scale > 1e-3 and worst < 1e-5


def test_advantages_none_equal_trls_and_std_scaled_differ_by_the_sample_std(setup):
    _, _, _, trl = setup
    rewards = torch.tensor(REWARDS).view(GROUPS, GROUP_SIZE)
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    assert torch.allclose(group_advantages(rewards, "none").flatten(), trl["advantages"]["none"], atol=1e-6)
    for norm, (population, sample) in {
        "group": (rewards.std(dim=1, unbiased=False, keepdim=True), rewards.std(dim=1, keepdim=True)),
        "batch": (rewards.std(unbiased=False), rewards.std()),
    }.items():
        ours = group_advantages(rewards, norm)
        # grpo: centered / (population std + 1e-6); TRL: centered / (sample std + 1e-4)
        assert torch.allclose(ours * (population + 1e-6), centered, atol=1e-6)
        assert torch.allclose((ours * (population + 1e-6) / (sample + 1e-4)).flatten(), trl["advantages"][norm],
                              atol=1e-6)
        # With algo.advantage_std=sample and algo.advantage_eps=1e-4, TRL's own advantages.
        trls = group_advantages(rewards, norm, std="sample", eps=1e-4).flatten()
        assert torch.allclose(trls, trl["advantages"][norm], atol=1e-6), (norm, trls, trl["advantages"][norm])
        ratio = trl["advantages"][norm] / ours.flatten()
        n = GROUP_SIZE if norm == "group" else GROUPS * GROUP_SIZE
        expected = (torch.tensor((n - 1) / n).sqrt())
        assert torch.allclose(ratio[ours.flatten().abs() > 0.1], expected, atol=2e-4), (norm, ratio)
