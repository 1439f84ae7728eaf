"""The servers' history in a run, for `grpo doctor`: starts and how long they took, every failure with
its step and cause, restarts, weight syncs repaired, and a server given up on."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

SERVER_EVENTS = ("server_start", "server_ready", "server_failed", "server_restart", "server_gave_up",
                 "weight_sync_verified", "weight_sync_mismatch", "weight_sync_repaired", "server_seeds")
SEED_VERDICTS = {True: "seeded samples reproducible", False: "seeded samples NOT reproducible (a replayed step "
                 "draws new samples)", None: "seeds' effect undetermined"}


def server_history(events: list[dict[str, Any]]) -> list[str]:
    """Lines for the doctor's SERVERS section; none for a run without a server."""
    mine = [e for e in events if e.get("kind") in SERVER_EVENTS]
    if not mine:
        return []
    by_server: dict[str, list[dict]] = defaultdict(list)
    for event in mine:
        by_server[(event.get("evidence") or {}).get("server", "?")].append(event)
    out = []
    for name, history in by_server.items():
        of = lambda kind: [e for e in history if e.get("kind") == kind]  # noqa: E731
        starts, ready, failed = of("server_start"), of("server_ready"), of("server_failed")
        incarnations = [e["evidence"].get("incarnation") for e in starts if e["evidence"].get("incarnation")]
        seconds = [e["evidence"]["seconds"] for e in ready if isinstance(e["evidence"].get("seconds"), (int, float))]
        attached = any(e.get("message", "").endswith("(attached)") for e in starts)
        line = f"{name}{' (attached)' if attached else ''}: {len(starts)} start(s)"
        if incarnations:
            line += f" (incarnations {min(incarnations)}-{max(incarnations)})" if len(incarnations) > 1 else (
                f" (incarnation {incarnations[0]})")
        if seconds:
            line += f", ready in {min(seconds):.0f}-{max(seconds):.0f}s" if len(seconds) > 1 else (
                f", ready in {seconds[0]:.0f}s")
        line += f", {len(failed)} failure(s), {len(of('server_restart'))} restart(s)"
        repaired, mismatched = of("weight_sync_repaired"), of("weight_sync_mismatch")
        if mismatched:
            line += f"; {len(mismatched)} weight probe(s) failed, {len(repaired)} sync(s) repaired"
        for event in of("server_seeds")[-1:]:
            line += f"; {SEED_VERDICTS[(event.get('evidence') or {}).get('reproducible')]}"
        out.append(("SERVERS  " if not out else "         ") + line)
        for event in failed[-5:]:
            evidence = event.get("evidence") or {}
            out.append(f"         step {event.get('step')}: {name}#{evidence.get('incarnation')} "
                       f"{'failed while starting' if evidence.get('while_starting') else 'failed'}: "
                       f"{event.get('message', '').split(': ', 1)[-1]}")
        for event in of("server_gave_up")[-1:]:
            out.append(f"         GAVE UP: {event.get('message')}")
    return out
