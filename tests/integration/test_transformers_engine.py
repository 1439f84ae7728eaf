"""rollout.engine=transformers in a whole run: it trains and records its steps, on the very samples the
embedded engine draws (the same seeds), with the trainer's own log-probs."""

from .helpers import metric_lines, run_tiny

SAMPLES = ("reward/", "response/", "rollout/ok", "rollout/truncated", "rollout/empty", "perf/generated_tokens")


def test_a_short_run_draws_the_embedded_engines_samples_and_records_its_steps(tmp_path):
    runs = {engine: tmp_path / engine for engine in ("embedded", "transformers")}
    for engine, run_dir in runs.items():
        loop = run_tiny([f"run_dir={run_dir}", f"rollout.engine={engine}", "train.steps=2",
                         "algo.recompute_old_logprobs=true", "checkpoint.every_steps=0"])
        assert loop.step == 2
    lines = {engine: metric_lines(run_dir) for engine, run_dir in runs.items()}
    assert [line["step"] for line in lines["transformers"]] == [1, 2]
    assert all(line["update/applied"] == 1 for line in lines["transformers"])
    assert all(line["rollout/logprob_mismatch_max"] < 1e-4 for line in lines["transformers"])
    # Step 1 samples from the same starting weights with the same seeds as the embedded engine.
    first = [{k: v for k, v in line.items() if k.startswith(SAMPLES)} for line in
             (lines["embedded"][0], lines["transformers"][0])]
    assert first[0] == first[1] and first[0]["perf/generated_tokens"] > 0
