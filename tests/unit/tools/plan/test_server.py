"""A started server's KV cache judged before it starts: too small for the longest request, or too large for the
memory beside the trainer, is refused with a value that works; what the tests, presets and README run is not."""

import json
import re

import pytest

from grpo.config import ServerConfig, load_config
from grpo.errors import ConfigError
from grpo.rollout.engines.server import make_backend
from grpo.tools.plan import GIB, SMOLLM2_135M, Architecture, architecture, refusal
from grpo.tools.plan.server import describe, server_cache
from grpo.tools.plan.server import refusal as cache_refusal

SMOL = Architecture.from_config_json(SMOLLM2_135M, "bfloat16")
SGLANG = ["rollout.engine=sglang", "model.dtype=bfloat16"]
VLLM = ["rollout.engine=vllm", "model.dtype=bfloat16"]
PROBE = 116  # the weight probe's length with SmolLM2's tokenizer, as SGLang reported it


def cache(overrides, arch=SMOL, prompt_len=59, probe_len=PROBE, device="cpu", preset="quickstart"):
    return server_cache(load_config(preset, overrides), device, arch, prompt_len, probe_len)


def suggested(line: str) -> float:
    return float(re.search(r"set (?:rollout\.server\.replicas=\d+ with )?rollout\.server\.kv_cache_gib=([\d.]+)",
                           line)[1])


def test_a_cache_too_small_for_the_weight_probe_is_refused_with_one_that_holds_every_request_at_once():
    small = cache([*SGLANG, "rollout.server.kv_cache_gib=0.001"])
    assert small.bytes_per_token == 2 * 30 * 3 * 64 * 2  # SmolLM2-135M in bf16: 23,040 bytes
    assert small.tokens() == 46 and small.sequence == PROBE + 4 + 6
    line = cache_refusal(small, 10 * GIB, "")
    assert line.startswith("rollout.server.kv_cache_gib=0.001 gives each sglang server a KV cache of 46 tokens")
    assert "fewer than the longest request takes: 126 (the weight probe's 116 tokens" in line and "\n" not in line
    fixed = cache([*SGLANG, f"rollout.server.kv_cache_gib={suggested(line)}"])
    assert fixed.tokens() >= fixed.in_flight * fixed.sequence and cache_refusal(fixed, 10 * GIB, "") is None


def test_the_longest_prompt_and_answer_set_the_need_when_longer_than_the_probe():
    long = cache([*SGLANG, "rollout.server.kv_cache_gib=0.01", "rollout.max_new_tokens=512"], prompt_len=300)
    assert long.sequence == 300 + 512 + 6
    line = cache_refusal(long, None, "")  # on a GPU: no room judged, the size in tokens still is
    assert "the longest prompt, 300, + rollout.max_new_tokens=512" in line
    assert cache([*SGLANG, f"rollout.server.kv_cache_gib={suggested(line)}", "rollout.max_new_tokens=512"],
                 prompt_len=300).tokens() >= long.in_flight * long.sequence


def test_a_cache_larger_than_the_room_beside_the_trainer_is_refused_with_the_largest_that_fits():
    huge = cache([*SGLANG, "rollout.server.kv_cache_gib=1000"])
    room = 15 * GIB
    line = cache_refusal(huge, room, "20.0 GiB available (MemAvailable) less the trainer's 5.0 GiB peak")
    assert line.startswith("rollout.server.kv_cache_gib=1000 with 1 sglang server(s) takes 1001.7 GiB of host memory")
    assert "more than the 15.0 GiB left beside the trainer (20.0 GiB available" in line and "\n" not in line
    largest = suggested(line)
    assert cache([*SGLANG, f"rollout.server.kv_cache_gib={largest}"]).servers_bytes() <= room
    assert cache([*SGLANG, f"rollout.server.kv_cache_gib={largest + 0.5}"]).servers_bytes() > room  # the largest
    enough = float(re.search(r"\(([\d.]+) holds the 64 requests each server is sent at once\)", line)[1])
    assert cache_refusal(cache([*SGLANG, f"rollout.server.kv_cache_gib={enough}"]), room, "") is None


def test_too_many_replicas_for_the_room_are_cut_to_the_most_that_fit():
    three = cache([*SGLANG, "rollout.server.kv_cache_gib=4", "rollout.server.replicas=3"])
    room = 4.5 * GIB  # two servers of 1.65 GiB beside their cache fit, three do not
    line = cache_refusal(three, room, "")
    assert "set rollout.server.replicas=2 with rollout.server.kv_cache_gib=" in line
    two = cache([*SGLANG, f"rollout.server.kv_cache_gib={suggested(line)}", "rollout.server.replicas=2"])
    assert cache_refusal(two, room, "") is None
    assert "no cache fits beside the trainer" in cache_refusal(three, 1 * GIB, "")


def test_vllm_takes_whole_gib_and_is_told_whole_gib():
    vllm = cache([*VLLM, "rollout.server.kv_cache_gib=0.3"])
    assert vllm.tokens() == GIB // vllm.bytes_per_token  # VLLM_CPU_KVCACHE_SPACE=1: what it takes, not the 0.3 asked
    line = cache_refusal(cache([*VLLM, "rollout.server.kv_cache_gib=100"]), 6.5 * GIB, "")
    assert suggested(line) == 4  # 6.5 GiB less vLLM's runtime and weights: 4.55; vLLM would take 4.5 as 4


def test_the_caches_the_tests_presets_and_readme_run_are_accepted():
    tiny = architecture(load_config("tiny"))
    tiny_vllm = architecture(load_config("tiny", ["model.tiny.num_heads=2"]))
    accepted = [
        cache(["rollout.engine=sglang", "rollout.server.kv_cache_gib=0.25"], tiny, 33, 200, preset="tiny"),
        cache(["rollout.engine=vllm", "rollout.server.kv_cache_gib=1", "model.tiny.num_heads=2"], tiny_vllm, 33, 200,
              preset="tiny"),
        cache([*SGLANG, "rollout.server.kv_cache_gib=1"]),  # the README's quickstart
        cache([*VLLM, "rollout.server.kv_cache_gib=2"]),  # docs/inference-servers.md's
    ]
    for judged in accepted:
        assert cache_refusal(judged, 12 * GIB, "") is None  # a 24 GB machine less the quickstart trainer's peak
        assert cache_refusal(judged, None, "") is None


@pytest.mark.parametrize("overrides", [
    ["rollout.server.kv_cache_gib=1"],  # the embedded engine starts no server
    [*SGLANG],  # the server's default size
    [*SGLANG, "rollout.server.kv_cache_gib=1", "rollout.server.urls=[http://127.0.0.1:1]"],  # attached
])
def test_nothing_is_judged_where_grpo_does_not_size_the_cache(overrides):
    assert cache(overrides) is None


def test_vllm_on_a_gpu_sizes_its_own_cache():
    assert cache([*VLLM, "rollout.server.kv_cache_gib=1"], device="cuda") is None
    assert cache([*SGLANG, "rollout.server.kv_cache_gib=1"], device="cuda").beside_bytes == SMOL.params * 2


def test_the_check_counts_the_tokens_sglang_is_started_with(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2_135M))
    judged = cache([*SGLANG, "rollout.server.kv_cache_gib=0.7"])
    spec = make_backend("sglang").launch(ServerConfig(kv_cache_gib=0.7), "py", tmp_path, "h", 1, "bfloat16", 0)
    assert spec.argv[spec.argv.index("--max-total-tokens") + 1] == str(judged.tokens())


def test_plan_says_when_the_cache_holds_fewer_requests_than_each_server_is_sent():
    few = cache([*SGLANG, "rollout.server.kv_cache_gib=0.01"])  # 466 tokens: 3 requests of 136 of the 64
    lines = describe(few, 10 * GIB)
    assert "it holds 3 such, and each server is sent up to 64 at once" in lines[0]
    assert re.search(r"the others wait for room in the cache: rollout.server.kv_cache_gib=[\d.]+ holds them all",
                     lines[1])
    assert lines[2].startswith("1 sglang server(s) x ") and lines[2].endswith(": fits")


def test_memory_check_false_and_torchrun_run_a_large_cache_but_never_one_too_small_for_a_request():
    tiny = ["rollout.engine=sglang", "memory.limit_gib=8"]
    large = load_config("tiny", [*tiny, "rollout.server.kv_cache_gib=1000"])
    assert "left beside the trainer" in refusal(large, "cpu")
    assert refusal(load_config("tiny", [*tiny, "rollout.server.kv_cache_gib=1000", "memory.check=false"]), "cpu") \
        is None
    assert refusal(large, "cpu", sharded=True) is None  # each rank holds a share: the memory is not modelled
    small = load_config("tiny", [*tiny, "rollout.server.kv_cache_gib=0.0001"])
    unchecked = load_config("tiny", [*tiny, "rollout.server.kv_cache_gib=0.0001", "memory.check=false"])
    for line in (refusal(unchecked, "cpu"), refusal(small, "cpu", sharded=True)):
        assert "fewer than the longest request takes" in line


@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_cache_of_no_size_is_a_config_error(value):
    # vLLM would have been started with its one-GiB minimum, whatever was asked
    with pytest.raises(ConfigError, match=r"^rollout.server.kv_cache_gib must be above 0 \(or null for the server's "
                                          r"default\); got -?\d"):
        load_config("tiny", ["rollout.engine=vllm", f"rollout.server.kv_cache_gib={value}"])
