"""The CPU image (Dockerfile) built and run as docs/container.md runs it (marked `container`: root, Debian's
docker.io and mmdebstrap; CI installs them and runs it).

`docker/local.sh` readies the engine and the base image made from Debian's packages; the image is built
with the command the page gives; the tiny preset trains in it with its run directory on a named volume,
is stopped as `docker stop` stops it, resumes from the volume with the same command, and `grpo doctor`
reads the finished run there. The containers, the volume, the image and its layers in the build cache
are removed; the base image stays in the engine (about 2 minutes to make again).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.waiting import wait_until

pytestmark = pytest.mark.container
REPO = Path(__file__).resolve().parents[2]
DOCKER = "/usr/bin/docker"  # Debian's client: it builds with BuildKit without buildx
BASE = "grpo-base:bookworm"
CACERT = Path("/etc/ssl/certs/ca-certificates.crt")


def docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "DOCKER_BUILDKIT": "1"})


def tail(proc: subprocess.CompletedProcess, lines: int = 30) -> str:
    return "\n".join((proc.stdout + proc.stderr).splitlines()[-lines:])


@pytest.fixture(scope="module")
def engine():
    """An engine with the base image (docker/local.sh); the dockerd it started, if it did, stopped after."""
    if os.geteuid() != 0:
        pytest.skip("needs root: docker/local.sh installs packages and starts dockerd")
    if not (Path(DOCKER).exists() and Path("/usr/sbin/dockerd").exists() and shutil.which("mmdebstrap")):
        pytest.skip("Debian's docker.io and mmdebstrap are not installed (.ci/run installs them; so does docker/local.sh)")
    answered = docker("info").returncode == 0
    ready = subprocess.run([REPO / "docker" / "local.sh"], capture_output=True, text=True, timeout=900)
    assert ready.returncode == 0, tail(ready)
    yield
    if not answered:
        stopped = subprocess.run([REPO / "docker" / "local.sh", "--stop"], capture_output=True, text=True, timeout=60)
        assert stopped.returncode == 0, tail(stopped)


@pytest.fixture
def names(engine):
    """Names for this test's image, volume and containers; each removed after it."""
    tag = f"grpo-test-{uuid.uuid4().hex[:8]}"
    made = {"image": f"{tag}:cpu", "volume": tag, "first": f"{tag}-1", "second": f"{tag}-2", "doctor": f"{tag}-3"}
    yield made
    for container in (made["first"], made["second"], made["doctor"]):
        docker("rm", "--force", "--volumes", container)
    docker("volume", "rm", made["volume"])
    docker("image", "rm", made["image"])
    # The image's layers stay in the build cache after it (1.6 GB): dangling now, pruned with any other.
    docker("builder", "prune", "--force", timeout=300)
    leftover = [what for what, found in [("volume", docker("volume", "inspect", made["volume"])),
                                         ("image", docker("image", "inspect", made["image"]))]
                if found.returncode == 0]
    assert not leftover, f"not removed: {leftover}"


def test_image_trains_resumes_from_its_volume_and_is_read_by_the_doctor(names):
    image, volume = names["image"], names["volume"]
    # As docs/container.md builds it, here: the local base, the host's CA certificates as a secret.
    started = time.monotonic()
    built = docker("build", "--build-arg", f"BASE={BASE}", "--secret", f"id=cacert,src={CACERT}",
                   "-t", image, str(REPO), timeout=1500)
    assert built.returncode == 0, tail(built)
    print(f"image built in {time.monotonic() - started:.0f} s")
    version = docker("run", "--rm", "--network", "none", "--entrypoint", "python", image, "-c",
                     "import os, torch; print(torch.__version__, torch.version.cuda, os.getuid())")
    assert version.stdout.split() == ["2.13.0+cpu", "None", "1000"], tail(version)

    assert docker("volume", "create", volume).returncode == 0
    run_dir = Path(docker("volume", "inspect", "--format", "{{.Mountpoint}}", volume).stdout.strip()) / "tiny"
    train = ["--network", "none", "-v", f"{volume}:/work/runs", image, "train", "--config", "tiny"]

    # The first run, stopped as `docker stop` stops it (SIGTERM, then SIGKILL after -t s) once step 1 is
    # recorded. A tiny step can take 0.05 s, so the six-step preset may end before the stop lands; asked for
    # 1,000 steps (a minute at least), the run is surely mid-way when it does.
    first = docker("run", "--detach", "--name", names["first"], *train, "train.steps=1000")
    assert first.returncode == 0, tail(first)

    def step_recorded() -> bool:
        if (run_dir / "metrics.jsonl").is_file() and (run_dir / "metrics.jsonl").read_text().strip():
            return True
        state = docker("inspect", "--format", "{{.State.Running}}", names["first"]).stdout.strip()
        assert state == "true", f"the first run ended before its first step:\n{tail(docker('logs', names['first']))}"
        return False

    wait_until(step_recorded, 300, "the containerised run's first step in its volume", interval=0.2)
    assert docker("stop", "--time", "30", names["first"], timeout=60).returncode == 0
    status = docker("wait", names["first"], timeout=60).stdout.strip()
    logs = docker("logs", names["first"])
    assert status == "4", f"exit status {status} after docker stop (4: interrupted, saved):\n{tail(logs)}"
    saved = json.loads((run_dir / "events.jsonl").read_text().splitlines()[-1])
    assert saved["kind"] == "interrupted" and 1 <= saved["step"] < 1000, saved
    step = saved["step"]

    # The same command resumes from the volume and finishes, asked now for two steps past the stop (the
    # length of a run may change on resume).
    last = step + 2
    second = docker("run", "--rm", "--name", names["second"], *train, f"train.steps={last}", timeout=600)
    assert second.returncode == 0, tail(second)
    assert f"resumed from runs/tiny/checkpoints/step_{step:06d} at step {step}" in second.stdout + second.stderr
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["message"] for e in events if e["kind"] == "restart"] == [f"resumed from runs/tiny/checkpoints/step_{step:06d}"]
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, last + 1)), steps

    doctor = docker("run", "--rm", "--name", names["doctor"], "--network", "none", "-v", f"{volume}:/work/runs",
                    image, "doctor", "runs/tiny")
    assert doctor.returncode == 0, tail(doctor)
    assert "DIAGNOSIS healthy" in doctor.stdout and f"finished: {last} steps" in doctor.stdout, doctor.stdout
