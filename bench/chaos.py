"""A run under a fault monkey ends where an unbroken run does.

An unbroken reference run, then the same command under a monkey that, at moments drawn from a seed,
does from outside what production does to a run: SIGKILL or SIGTERM the trainer, SIGKILL a server's
processes (its reaper spared, as the OOM killer does) or its whole group, SIGSTOP them until the trainer
finds the hang, fill the run directory's filesystem (a small tmpfs; the
filler is freed again), and tear the newest checkpoint's weights as a crash mid-write would. After
every trainer death it runs the same command again, as a scheduler would. At the end it checks:
every step's metrics line present exactly once and equal to the reference's, the final weights'
largest difference from the reference's, no sample from a dead server incarnation trained on, no
process or /dev/shm file left over; and prints the table of faults, recoveries and time lost.

    python bench/chaos.py [--setup embedded|stale2|server|two-servers|sglang|vllm] [--faults 10] [--seed 0]
                          [--config tiny] [--steps 30] [--out bench_runs/chaos] [--server-python PY]
                          [--set KEY=VALUE ...]

`server` and `two-servers` use the SGLang stand-in (tests/standins), which honours seeds; `sglang` and
`vllm` start the real servers from their environments (scripts/setup_sglang_env.sh, setup_vllm_env.sh).

Exit status 0 when every check holds. The tmpfs (for the full disk) needs root; without it the disk
fault is left out and the table says so.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from grpo.rollout.server.reaper import session_members, shm_in_use

ROOT = Path(__file__).resolve().parents[1]
STANDIN = ROOT / "tests" / "standins" / "sglang_server.py"
STANDIN_SERVER = [
    "rollout.engine=sglang", "rollout.server.restart_backoff_s=0.2", "rollout.server.health_timeout_s=3",
    "rollout.server.stall_s=3",
    "rollout.server.max_restarts=1000",
    f"rollout.server.command={{python}} {STANDIN} --model-path {{model}} --host {{host}} --port {{port}} "
    "--dtype {dtype} --seed {seed}"]
# A real server's one-token health probe waits behind a batch being decoded on the same two cores: its
# timeout is longer than the stand-in's; a SIGSTOP lasts twice the longer of it and stall_s.
REAL_SERVER = ["rollout.server.restart_backoff_s=0.2", "rollout.server.health_timeout_s=20",
               "rollout.server.max_restarts=1000", "rollout.server.kv_cache_gib=1"]
SETUPS = {
    "embedded": [],
    "stale2": ["rollout.max_staleness=2"],
    "server": STANDIN_SERVER,
    "two-servers": [*STANDIN_SERVER, "rollout.server.replicas=2"],
    "sglang": ["rollout.engine=sglang", *REAL_SERVER],
    "vllm": ["rollout.engine=vllm", *REAL_SERVER],
}
REAL_SERVER_PYTHON = {"sglang": ROOT / ".venv-sglang" / "bin" / "python",
                      "vllm": ROOT / ".venv-vllm" / "bin" / "python"}
SERVER_SETUPS = ("server", "two-servers", "sglang", "vllm")
TRAINER_FAULTS = ["sigkill_trainer", "sigterm_trainer", "full_disk", "torn_checkpoint"]
SERVER_FAULTS = ["sigkill_server", "sigkill_server_group", "sigstop_server"]
FAULT_KINDS = {
    "sigkill_trainer": "SIGKILL to the trainer (the OOM killer, a preemption)",
    "sigterm_trainer": "SIGTERM to the trainer (docker stop, a scheduler)",
    "full_disk": "the run directory's filesystem filled, then freed (needs root: a tmpfs)",
    "torn_checkpoint": "SIGKILL to the trainer, then its newest checkpoint's weights cut in half",
    "sigkill_server": "SIGKILL to a server's own processes, its reaper spared (as the OOM killer picks one)",
    "sigkill_server_group": "SIGKILL to a server's whole process group, its reaper too (another job's kill)",
    "sigstop_server": "SIGSTOP to a server's processes until the trainer finds it hung (or twice the longer of its "
                      "hang bounds), then SIGCONT",
}
NOISY = ("time", "time/", "perf/", "memory/", "rollout/sources", "sync/seconds")
PR_SET_CHILD_SUBREAPER = 36
SERVER_UP_S = 300  # how long a server fault waits for a server the trainer counts as ready (one restarting)
SHM_POLL_S = 0.5  # how often the monkey notes what its process tree holds in /dev/shm


@dataclass
class Fault:
    kind: str
    at: float  # seconds since the chaos run began
    step: int  # the newest step logged when it struck
    recovered_s: float | None = None  # until a step past `step` was logged again
    note: str = ""


@dataclass
class Chaos:
    run_dir: Path
    command: list[str]
    rng: random.Random
    kinds: list[str]
    in_order: bool  # the faults are `kinds` in turn (--kinds), not drawn from them
    faults_wanted: int
    delay_s: tuple[float, float]
    disk: Path | None
    logs: Path
    stop_s: float = 0.0  # how long a SIGSTOPped server stays stopped: past the hang detection's bound
    started: float = field(default_factory=time.monotonic)
    faults: list[Fault] = field(default_factory=list)
    launches: int = 0
    exits: list[int] = field(default_factory=list)
    shm_held: set[int] = field(default_factory=set)  # inodes of /dev/shm files this run's processes held
    shm_noted: float = 0.0

    def run(self) -> int:
        """Until the run finishes (exit 0) or ends in a way no scheduler retries (crash, refusal). Each fault
        ends at most one launch: many more launches than faults is a run that cannot go on (exit 1)."""
        while True:
            if self.launches > self.faults_wanted + 10:
                return 1
            self.launches += 1
            with open(self.logs / f"trainer-{self.launches}.log", "w") as log:
                proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            code = self._watch(proc)
            self.exits.append(code)
            if code == 0:
                return 0
            if code not in (-signal.SIGKILL, -signal.SIGTERM, 4, 5):  # killed, interrupted, disk full: retried
                return code

    def _watch(self, proc: subprocess.Popen) -> int:
        """Inject faults into this incarnation of the trainer until it exits. Each fault waits for the
        incarnation to train a step past where the last one left it, then for a drawn delay: a fault lands
        mid-training whatever the machine's speed, never on a trainer still starting."""
        while proc.poll() is None:
            if len(self.faults) >= self.faults_wanted:
                return self._wait(proc)
            kind = self.kinds[len(self.faults) % len(self.kinds)] if self.in_order else self.rng.choice(self.kinds)
            delay = self.rng.uniform(*self.delay_s)
            reached = self._newest_step()
            while proc.poll() is None and self._newest_step() <= reached:
                self._note_progress()
                time.sleep(0.05)  # polling the run directory, as an outside observer does
            deadline = time.monotonic() + delay
            while proc.poll() is None and time.monotonic() < deadline:
                self._note_progress()
                time.sleep(0.05)  # the monkey's own clock: it picks moments, it does not wait for events
            if proc.poll() is not None:
                break
            self._strike(kind, proc)
        return self._wait(proc)

    def _wait(self, proc: subprocess.Popen) -> int:
        while proc.poll() is None:
            self._note_progress()
            time.sleep(0.05)
        self._note_progress()
        return proc.returncode

    def _strike(self, kind: str, proc: subprocess.Popen) -> None:
        pid = self._server_up(proc) if kind in SERVER_FAULTS else None
        fault = Fault(kind, time.monotonic() - self.started, self._newest_step())
        if kind == "sigkill_trainer":
            os.kill(proc.pid, signal.SIGKILL)
        elif kind == "sigterm_trainer":
            os.kill(proc.pid, signal.SIGTERM)
        elif kind == "torn_checkpoint":  # a crash in the middle of writing the newest checkpoint's weights
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            checkpoints = sorted((self.run_dir / "checkpoints").glob("step_*"))
            if len(checkpoints) < 2:
                fault.note = "only one checkpoint: killed, not torn"
            else:
                weights = checkpoints[-1] / "model" / "model.safetensors"
                with open(weights, "r+b") as f:
                    f.truncate(weights.stat().st_size // 2)
                fault.note = f"{checkpoints[-1].name} torn"
        elif kind == "full_disk":
            fault.note = self._fill_disk(proc)
        elif kind in SERVER_FAULTS:
            if pid is None:
                fault.note = f"no server up within {SERVER_UP_S} s: nothing done"
            elif kind == "sigkill_server":
                _signal_server(pid, signal.SIGKILL)
                fault.note = f"pid {pid}: the server's processes"
            elif kind == "sigkill_server_group":
                _signal_group(pid, signal.SIGKILL)
                fault.note = f"pid {pid}: its whole group"
            else:
                _signal_server(pid, signal.SIGSTOP)
                stopped, end = time.monotonic(), time.monotonic() + self.stop_s
                while time.monotonic() < end and proc.poll() is None and pid in self._ready_pids():
                    self._note_progress()
                    time.sleep(0.05)
                _signal_server(pid, signal.SIGCONT)  # a hang the trainer found: it killed the server meanwhile
                found = "" if pid in self._ready_pids() else ", until the trainer took it down"
                fault.note = f"pid {pid} stopped {time.monotonic() - stopped:.1f}s{found}"
        self.faults.append(fault)

    def _fill_disk(self, proc: subprocess.Popen) -> str:
        if self.disk is None:
            return "no tmpfs: nothing done"
        filler = self.disk / "filler"
        with open(filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 16))
            except OSError:
                pass
        end = time.monotonic() + self.rng.uniform(*self.delay_s)  # full until the trainer fails or this passes
        while proc.poll() is None and time.monotonic() < end:
            self._note_progress()
            time.sleep(0.05)
        filler.unlink()
        return "trainer exited while full" if proc.poll() is not None else "freed while the trainer ran"

    def _server_up(self, proc: subprocess.Popen) -> int | None:
        """A ready server's reaper, waiting for one while the last fault's server restarts (async rollouts can
        log a step within milliseconds of a kill, so a drawn moment may fall there): a fault that hits no
        server tests nothing."""
        end = time.monotonic() + SERVER_UP_S
        while (pid := self._server_pid()) is None and proc.poll() is None and time.monotonic() < end:
            self._note_progress()
            time.sleep(0.05)
        return pid

    def _server_pid(self) -> int | None:
        pids = self._ready_pids()
        return self.rng.choice(pids) if pids else None

    def _ready_pids(self) -> list[int]:
        """The reapers of the servers the trainer counts as ready (servers/status.json)."""
        try:
            status = json.loads((self.run_dir / "servers" / "status.json").read_text())
        except (OSError, ValueError):
            return []
        return [s["pid"] for s in status.get("servers", []) if s.get("state") == "ready" and s.get("pid")]

    def _newest_step(self) -> int:
        try:
            lines = (self.run_dir / "metrics.jsonl").read_text().splitlines()
        except OSError:
            return 0
        steps = [json.loads(line)["step"] for line in lines if line.strip().endswith("}")]
        return max(steps, default=0)

    def _note_progress(self) -> None:
        if time.monotonic() - self.shm_noted > SHM_POLL_S:
            self.shm_held |= shm_in_use(descendants())
            self.shm_noted = time.monotonic()
        pending = [f for f in self.faults if f.recovered_s is None]
        if pending and (step := self._newest_step()) > 0:
            now = time.monotonic() - self.started
            for f in pending:
                if step > f.step:
                    f.recovered_s = now - f.at


def _signal_server(reaper: int, sig: int) -> None:
    """`sig` to every process of the server's session (led by grpo's reaper `reaper`) but the reaper."""
    for pid in session_members(reaper):
        if pid != reaper:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def deterministic(line: dict) -> dict:
    return {k: v for k, v in line.items() if not k.startswith(NOISY)}


def weights_difference(a: Path, b: Path, step: int) -> float:
    from safetensors.torch import load_file

    name = f"checkpoints/step_{step:06d}/model/model.safetensors"
    wa, wb = load_file(a / name), load_file(b / name)
    return max((wa[k].float() - wb[k].float()).abs().max().item() for k in wa)


def dead_incarnations_trained_on(run_dir: Path, lines: list[dict]) -> list[str]:
    """Server incarnations whose samples a step begun after their failure trained on (a batch finished
    before a server died may be trained on: its samples came from verified weights while it lived)."""
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    died = {f"{e['message'].split(':')[0]}#{e['evidence']['incarnation']}": e["time"]
            for e in events if e["kind"] == "server_failed" and "incarnation" in e.get("evidence", {})}
    return sorted({f"{s} (step {line['step']})" for line in lines for s in line.get("rollout/sources", [])
                   if s in died and line["time"] - line.get("time/step_s", 0.0) > died[s]})


def ignores_seeds(run_dir: Path) -> bool:
    """Whether a server of this run said, at its seed check, that the same seeded request gave other tokens."""
    events = run_dir / "events.jsonl"
    return events.is_file() and any(
        e["kind"] == "server_seeds" and e.get("evidence", {}).get("reproducible") is False
        for e in map(json.loads, events.read_text().splitlines()))


def descendants() -> list[int]:
    """This process's descendants: the trainers, their servers and reapers (this process is their child
    subreaper, so a killed trainer's children stay in the tree)."""
    children: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(pid))
    found, todo = [], [os.getpid()]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def leftovers(run_dir: Path, shm_held: set[int]) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(run_dir) in cmdline and int(pid) != os.getpid():
            found.append(f"process {pid}: {cmdline[:120]}")
    # This run's weight copy by name; the servers' own files (semaphores, SGLang's and vLLM's segments)
    # by having been held by this run's processes: another program's files on the machine are not ours.
    ours = f"grpo-{hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:12]}"
    found += [f"/dev/shm/{e.name}" for e in sorted(os.scandir("/dev/shm"), key=lambda e: e.name)
              if e.name == ours or e.inode() in shm_held]
    return found


def mount_tmpfs(path: Path, size: str) -> Path | None:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return None
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    return path if done.returncode == 0 else None


def table(chaos: Chaos) -> list[str]:
    out = [f"{'fault':<18}{'injected':>9}{'recovered':>10}{'lost s (median)':>17}{'lost s (max)':>13}"]
    for kind in sorted({f.kind for f in chaos.faults}):
        of = [f for f in chaos.faults if f.kind == kind]
        lost = sorted(f.recovered_s for f in of if f.recovered_s is not None)
        med = f"{lost[len(lost) // 2]:.1f}" if lost else "-"
        out.append(f"{kind:<18}{len(of):>9}{len(lost):>10}{med:>17}{(f'{lost[-1]:.1f}' if lost else '-'):>13}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="fault kinds: " + "; ".join(
        f"{kind}: {what}" for kind, what in FAULT_KINDS.items()) + " (server faults with a server setup only)")
    parser.add_argument("--setup", choices=list(SETUPS), default="embedded")
    parser.add_argument("--faults", type=int, default=10)
    parser.add_argument("--kinds", help="comma-separated fault kinds struck in this order (repeated as needed); "
                                        "default: each drawn at random from all that the setup allows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default="tiny")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--delay", default="auto", help="seconds from a step of progress to the next fault: "
                                                         "uniform in MIN,MAX; auto: up to a quarter of the "
                                                         "reference's training time per fault")
    parser.add_argument("--disk", default="256m", help="the chaos run's tmpfs (for the full-disk fault)")
    parser.add_argument("--out", default="bench_runs/chaos")
    parser.add_argument("--server-python", help="the real server's environment (--setup sglang|vllm); default: "
                                                    ".venv-sglang or .venv-vllm")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    possible = [*TRAINER_FAULTS, *(SERVER_FAULTS if args.setup in SERVER_SETUPS else [])]
    if args.kinds and (unknown := [k for k in args.kinds.split(",") if k not in possible]):
        parser.error(f"--kinds: {', '.join(unknown)} not possible with --setup {args.setup}; valid: {', '.join(possible)}")
    setup = list(SETUPS[args.setup])
    if args.setup in REAL_SERVER_PYTHON:
        python = Path(args.server_python or REAL_SERVER_PYTHON[args.setup])
        if not python.is_file():
            raise SystemExit(f"{python} does not exist: build it with scripts/setup_{args.setup}_env.sh")
        setup.append(f"rollout.server.python={python}")
    # A SIGSTOP lasts past both ways a hang is found (the last override of each wins, as in grpo's command line).
    bounds = {"rollout.server.health_timeout_s": 30.0, "rollout.server.stall_s": 10.0}
    for override in [*setup, *args.set]:
        key, _, value = override.partition("=")
        if key in bounds:
            bounds[key] = float(value)

    out = Path(args.out).resolve() / args.setup
    if out.exists():
        for mount in (out / "disk",):
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        shutil.rmtree(out)
    out.mkdir(parents=True)
    overrides = [*setup, f"train.steps={args.steps}", "checkpoint.every_steps=1", "checkpoint.keep_last=2",
                 "logging.progress=false", *args.set]
    base = [sys.executable, "-m", "grpo", "train", "--config", args.config]

    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    reference = out / "reference" / "r"
    started, started_wall = time.monotonic(), time.time()
    with open(out / "reference.log", "w") as log:
        code = subprocess.run([*base, f"run_dir={reference}", *overrides], stdout=log, stderr=subprocess.STDOUT).returncode
    reference_s = time.monotonic() - started
    if code != 0:
        print(f"the reference run failed (exit {code}): {out / 'reference.log'}")
        return 1

    disk = mount_tmpfs(out / "disk", args.disk)
    run_dir = (disk or out / "chaos") / "r"
    kinds = TRAINER_FAULTS + (SERVER_FAULTS if args.setup in SERVER_SETUPS else [])
    if disk is None:
        kinds.remove("full_disk")
    if args.delay == "auto":
        # After a step of progress (see Chaos._watch), up to a quarter of the reference's training time per
        # fault, so that the faults fit in the run at any machine's speed.
        first_step_s = json.loads((reference / "metrics.jsonl").read_text().splitlines()[0])["time"] - started_wall
        low, high = 0.0, max(reference_s - first_step_s, 0.0) / max(args.faults, 1) / 4
    else:
        low, high = (float(x) for x in args.delay.split(","))
    if args.kinds:
        kinds = [k for k in args.kinds.split(",") if k in kinds]  # full_disk goes where no tmpfs could be made
    chaos = Chaos(run_dir, [*base, f"run_dir={run_dir}", *overrides], random.Random(args.seed), kinds, bool(args.kinds),
                  args.faults,
                  (low, high), disk, out, stop_s=2 * max(bounds.values()))
    code = chaos.run()
    chaos_s = time.monotonic() - chaos.started

    problems = []
    if code != 0:
        problems.append(f"the chaos run ended with exit {code} (see {out}/trainer-{chaos.launches}.log)")
    ref_lines, lines = metrics(reference), metrics(run_dir) if (run_dir / "metrics.jsonl").exists() else []
    steps = [line["step"] for line in lines]
    if steps != list(range(1, args.steps + 1)):
        problems.append(f"metrics steps are not 1..{args.steps} exactly once: {steps}")
    # A server killed or hung mid-batch fails samples, and their retries draw from new seeds (the
    # attempt is part of a sample's seed): from then on the run is a different, valid one. Exactness
    # is required up to the first server fault that struck, and to the end without one. A server that
    # ignores seeds (its seed check says so) makes every run a different one: only the invariants hold.
    struck = [f.step for f in chaos.faults if f.kind in SERVER_FAULTS and f.note.startswith("pid")]
    unseeded = ignores_seeds(reference)
    exact_until = 0 if unseeded else min(struck, default=args.steps)
    differing = [(a["step"], k) for a, b in zip(ref_lines, lines) for k in deterministic(a)
                 if a["step"] <= exact_until and deterministic(a).get(k) != deterministic(b).get(k)]
    if differing:
        problems.append(f"{len(differing)} metric values differ from the reference's, first at step "
                        f"{differing[0][0]}: {differing[0][1]}")
    largest = weights_difference(reference, run_dir, args.steps) if code == 0 else float("nan")
    if largest != 0.0 and not struck and not unseeded:
        problems.append(f"final weights differ from the reference's by up to {largest:g}")
    dead = dead_incarnations_trained_on(run_dir, lines) if lines else []
    if dead:
        problems.append(f"samples of dead server incarnations trained on: {dead}")
    left = leftovers(run_dir, chaos.shm_held)
    if left:
        problems.append(f"left over: {left}")

    print(f"chaos ({args.setup}, {args.config}, {args.steps} steps, seed {args.seed}): {len(chaos.faults)} faults, "
          f"{chaos.launches} trainer launches, exits {chaos.exits}")
    print("\n".join(table(chaos)))
    recovered = sum(f.recovered_s is not None for f in chaos.faults)
    print(f"recovered {recovered}/{len(chaos.faults)}; wall {chaos_s:.0f}s vs the reference's {reference_s:.0f}s "
          f"(lost {chaos_s - reference_s:.0f}s); steps lost {args.steps - len(set(steps))}, duplicated "
          f"{len(steps) - len(set(steps))}; compared exactly through step {exact_until}"
          f"{' (the server ignores seeds)' if unseeded else ' (the first server fault)' if struck else ''}: metric values differing {len(differing)}; final weights' largest "
          f"difference {largest:g}; dead-incarnation samples trained on {len(dead)}; leftovers {len(left)}")
    for f in chaos.faults:
        print(f"  {f.at:7.1f}s  step {f.step:3d}  {f.kind:<16} recovered "
              f"{'after %.1fs' % f.recovered_s if f.recovered_s is not None else 'not seen'}  {f.note}")
    (out / "result.json").write_text(json.dumps({
        "setup": args.setup, "faults": [f.__dict__ for f in chaos.faults], "exits": chaos.exits,
        "problems": problems, "largest_weight_difference": largest, "exact_until": exact_until, "server_ignores_seeds": unseeded, "chaos_s": chaos_s, "reference_s": reference_s,
    }, indent=2))
    if disk is not None:
        shutil.copytree(run_dir, out / "chaos" / "r", ignore=shutil.ignore_patterns("checkpoints"))
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
    print("OK" if not problems else "PROBLEMS:\n  " + "\n  ".join(problems))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
