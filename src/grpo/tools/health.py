"""`grpo health [RUN_DIR]`: is this run healthy right now? Servers up and generating, restarts and
recent failures, the policy version the servers serve against the trainer's, host and GPU memory,
OOM kills where the kernel log is readable, disk free for checkpoints, the last good checkpoint, and
the time since the last step.

Exit status (`check` returns it): 0 healthy, every server of a running trainer serving; 1 unhealthy, a
problem someone must look at; 3 not serving, nothing wrong but a server not serving yet, starting within its
rollout.server.startup_timeout_s or failed and to be restarted within its rollout.server.max_restarts (the
CLI exits 2 for a path that is not a run directory).

It reads the run directory and asks the servers directly; it never takes the run's lock.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

from grpo import metric_keys as keys
from grpo.config import CheckpointConfig, ServerConfig, load_config
from grpo.errors import ConfigError
from grpo.rundir.checkpoints import CheckpointStore
from grpo.rundir.files import JsonlLog, read_json
from grpo.rundir.lock import current_holder, describe_holder

RECENT_S = 3600.0  # failures within the last hour count as recent
HEALTHY, UNHEALTHY, NOT_SERVING = 0, 1, 3  # exit statuses


def find_run(path: str | None) -> Path:
    """The given run directory, or the most recently active one under ./runs."""
    if path:
        return Path(path)
    candidates = [p for p in Path("runs").glob("*") if (p / "events.jsonl").is_file() or (p / "config.yaml").is_file()]
    if not candidates:
        raise FileNotFoundError("no run directory given and none under ./runs: grpo health RUN_DIR")
    return max(candidates, key=lambda p: max(f.stat().st_mtime for f in p.iterdir()))


def check(run_dir: Path) -> tuple[list[str], int]:
    """-> (report lines, exit status: HEALTHY, UNHEALTHY or NOT_SERVING)."""
    run_dir = Path(run_dir)
    if not (run_dir / "events.jsonl").is_file() and not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no events.jsonl or config.yaml)")
    problems: list[str] = []
    waiting: list[str] = []  # servers not serving yet, within their limits
    out = [f"run {run_dir}"]
    out += _trainer(run_dir, problems)
    out += _servers(run_dir, problems, waiting)
    out += _resources(run_dir, problems)
    if problems:
        out.append("UNHEALTHY: " + "; ".join(problems + waiting))
        return out, UNHEALTHY
    if waiting:
        out.append("NOT SERVING: " + "; ".join(waiting))
        return out, NOT_SERVING
    out.append("HEALTHY")
    return out, HEALTHY


def _trainer(run_dir: Path, problems: list[str]) -> list[str]:
    holder = current_holder(run_dir)
    lines, _ = JsonlLog(run_dir / "metrics.jsonl").read()
    stopped, _ = read_json(run_dir / "STOPPED.json")
    summary, _ = read_json(run_dir / "summary.json")
    out = []
    if holder is not None:
        out.append(f"TRAINER  running ({describe_holder(holder)})")
    elif isinstance(stopped, dict):
        out.append(f"TRAINER  stopped by the guard at step {stopped.get('step')}: {stopped.get('cause')}")
        problems.append("the run was stopped by the guard (grpo doctor explains; STOPPED.json has the resume command)")
    elif isinstance(summary, dict) and summary.get("status") == "finished":
        out.append(f"TRAINER  finished: {summary.get('steps')} steps")
    else:
        out.append("TRAINER  not running, not finished (crashed, killed or interrupted: grpo doctor explains)")
        problems.append("no trainer is running and the run did not finish")
    if lines:
        last = lines[-1]
        since = time.time() - last.get("time", 0)
        step_times = [line[keys.STEP_S] for line in lines[-20:] if isinstance(line.get(keys.STEP_S), (int, float))]
        typical = statistics.median(step_times) if step_times else 0.0
        out.append(f"STEPS    last step {last.get('step')} finished {since:.0f}s ago (typical step {typical:.1f}s)")
        # A running trainer silent for many typical steps (and at least 10 minutes) is stuck.
        if holder is not None and since > max(10 * typical, 600):
            problems.append(f"no step for {since:.0f}s while a step usually takes {typical:.1f}s")
    else:
        out.append("STEPS    no step recorded yet")
    return out


def _servers(run_dir: Path, problems: list[str], waiting: list[str]) -> list[str]:
    status, why = read_json(run_dir / "servers" / "status.json")
    if status is None:
        return ["SERVERS  none (an in-process engine)" if why == "missing" else f"SERVERS  status.json is {why}"]
    from grpo.rollout.engines.server import make_backend
    from grpo.rollout.server.client import HttpClient, ServerError

    running = current_holder(run_dir) is not None
    trainer_version = status.get("trainer_policy_version")
    events, _ = JsonlLog(run_dir / "events.jsonl").read()
    recent = [e for e in events if e.get("kind") == "server_failed" and time.time() - e.get("time", 0) < RECENT_S]
    out = [f"SERVERS  {status.get('engine')}: trainer policy version {trainer_version}, "
           f"{len(recent)} server failure(s) in the last hour"]
    for server in status.get("servers", []):
        name, url, pid = server.get("name"), server.get("url"), server.get("pid")
        state = server.get("state")
        if not running:  # status.json is what a trainer last saw: no trainer, no server it still runs
            state = (f"left running by a trainer that is gone (process {pid})" if pid is not None and _alive(pid)
                     else f"gone with the trainer (was {state})")
            if pid is not None and _alive(pid):
                problems.append(f"{name}'s process {pid} outlived its trainer")
        line = (f"         {name} at {url}: {state}, incarnation {server.get('incarnation')}, "
                f"{server.get('restarts')} of {server.get('max_restarts')} restarts used, serves policy version "
                f"{server.get('policy_version')}, {server.get('requests', 0)} requests answered"
                + (" (restarting while the others serve)" if server.get("restarting_aside") else ""))
        out.append(line)
        out.append(f"         {name}: {_seeds_line(server.get('seeds'))}")
        if not running:
            continue  # a finished or stopped run's servers are gone by design
        if server.get("state") == "starting":  # status.json follows every start and failure
            out.append(f"         {name}: " + _starting(run_dir, server, events, problems, waiting))
            continue
        if server.get("state") == "failed":
            out.append(f"         {name}: " + _failed(server, events, problems, waiting))
            continue
        if server.get("state") == "gave_up":
            problems.append(f"{name} was given up on")
        if pid is not None and not _alive(pid):
            problems.append(f"{name}'s process {pid} is gone")
            out.append(f"         {name}: process {pid} is not running")
        try:
            client = HttpClient(url, 10.0, 1, retries=0)
            started = time.monotonic()
            make_backend(status.get("engine")).health_generate(client, status.get("health_ids") or [1, 2, 3],
                                                               ServerConfig().health_timeout_s)
            out.append(f"         {name}: generated a token in {time.monotonic() - started:.2f}s")
        except (ServerError, ValueError) as exc:
            problems.append(f"{name} does not generate ({exc})")
            out.append(f"         {name}: NOT generating: {exc}")
        if server.get("policy_version") != trainer_version:
            problems.append(f"{name} serves policy version {server.get('policy_version')}, the trainer is at "
                            f"{trainer_version}")
    for event in recent[-3:]:
        out.append(f"         failure: {event.get('message')}")
    return out


def _starting(run_dir: Path, server: dict, events: list[dict], problems: list[str], waiting: list[str]) -> str:
    """A server starting: not serving yet while its start is within the run's startup timeout; a problem past
    it, or when its process is gone. -> what the report says of it."""
    name, pid = server.get("name"), server.get("pid")
    if pid is not None and not _alive(pid):
        problems.append(f"{name}'s process {pid} is gone while starting")
        return f"starting; its process {pid} is gone"
    timeout = _server_config(run_dir).startup_timeout_s
    start = next((e for e in reversed(events) if e.get("kind") == "server_start"
                  and (e.get("evidence") or {}).get("server") == name
                  and (e.get("evidence") or {}).get("incarnation") == server.get("incarnation")), None)
    if start is None:
        waiting.append(f"{name} is starting")
        return "starting"
    since = time.time() - start.get("time", 0)
    if since > timeout:
        problems.append(f"{name} has been starting for {since:.0f}s, past rollout.server.startup_timeout_s="
                        f"{timeout:g}")
        return f"starting for {since:.0f}s, past its {timeout:g}s startup timeout"
    waiting.append(f"{name} is starting ({since:.0f}s of its {timeout:g}s startup timeout)")
    return f"starting for {since:.0f}s (startup timeout {timeout:g}s)"


def _failed(server: dict, events: list[dict], problems: list[str], waiting: list[str]) -> str:
    """A failed server: not serving until its restart while one is under way or left; a problem once none is."""
    name, used, most = server.get("name"), server.get("restarts") or 0, server.get("max_restarts") or 0
    failures = server.get("failures") or []
    when = f" {time.time() - failures[-1]['time']:.0f}s ago" if failures and "time" in failures[-1] else ""
    last = next((e for e in reversed(events) if e.get("kind") in ("server_failed", "server_restart")
                 and (e.get("evidence") or {}).get("server") == name), {})
    if last.get("kind") != "server_restart" and used >= most:
        problems.append(f"{name} failed with its {most} restarts used up (rollout.server.max_restarts): the run "
                        "stops when it next needs it")
        return f"failed{when}, its {most} restarts used up"
    waiting.append(f"{name} failed{when} and is to be restarted")
    return f"failed{when}, to be restarted"


def _server_config(run_dir: Path) -> ServerConfig:
    """The run's server section (config.yaml), else the defaults: a first start has not written it yet."""
    try:
        return load_config(str(run_dir / "config.yaml")).rollout.server
    except (ConfigError, OSError, ValueError):
        return ServerConfig()


def _seeds_line(seeds: dict | None) -> str:
    """The seed check's verdict (grpo.rollout.server.seed_check), made at the server's first start."""
    if not seeds:
        return "seeds: not checked yet (the check runs once the server first answers)"
    verdict = {True: "reproducible", False: "NOT reproducible", None: "undetermined"}[seeds.get("reproducible")]
    return f"seeded samples {verdict}: {seeds.get('detail')}"


def _resources(run_dir: Path, problems: list[str]) -> list[str]:
    out = [f"MEMORY   host {_meminfo()}" + (f"; {gpu}" if (gpu := _gpu_memory()) else "")]
    ooms = _oom_lines()
    if ooms is None:
        out.append("OOM      kernel log not readable here")
    else:
        out.append(f"OOM      {len(ooms)} out-of-memory kill(s) in the kernel log"
                   + (f"; last: {ooms[-1].strip()}" if ooms else ""))
    store = CheckpointStore(run_dir / "checkpoints", CheckpointConfig())
    valid = store.list()
    good = [i for i in valid if i.healthy]
    size = sum(f["size"] for f in valid[-1].meta["files"].values()) if valid else 0
    free = shutil.disk_usage(run_dir).free
    out.append(f"DISK     {free / 2**30:.1f} GiB free; a checkpoint takes {size / 2**30:.2f} GiB")
    if size and free < 2 * size:
        problems.append(f"only {free / 2**30:.2f} GiB free for checkpoints of {size / 2**30:.2f} GiB")
    out.append(f"CHECKPT  last good: {good[-1].path if good else 'none'}")
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _meminfo() -> str:
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        total, available = (int(info[k].split()[0]) / 2**20 for k in ("MemTotal", "MemAvailable"))
        return f"{available:.1f} GiB available of {total:.1f} GiB"
    except (OSError, KeyError, ValueError):
        return "unknown"


def _gpu_memory() -> str | None:
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        free, total = torch.cuda.mem_get_info()
        return f"GPU {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB"
    except (ImportError, RuntimeError):
        return None


def _oom_lines() -> list[str] | None:
    import subprocess

    try:
        result = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        return None
    return [line for line in result.stdout.splitlines() if "out of memory" in line.lower() or "oom-kill" in line]

