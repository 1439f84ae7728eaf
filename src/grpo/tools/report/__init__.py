"""`grpo report PATH`: one self-contained HTML file that draws a run: the doctor's diagnosis at the
top, then its curves (reward and accuracy, train and eval; loss; KL; entropy; response length;
truncation, zero-variance and failure fractions; rollouts by status; per-phase step time, stacked;
memory), with trips, rollbacks, restarts, server failures and resumes marked on every curve.

Any PATH the doctor reads (a grpo run, AReaL, verl, TRL). The plots are Plotly's: its JavaScript
(plotly.js) is written into the file itself, so the report opens offline, from a mail attachment or
an air-gapped cluster, with no request to a CDN; and a person can hover a step to read its values
and zoom into the step where the reward fell, which a static image does not allow.
"""

from __future__ import annotations

import html
from pathlib import Path

from grpo.checks import CHECKS
from grpo.rundir.files import atomic_write
from grpo.tools.doctor import UnreadableRun, examine
from grpo.tools.doctor.record import (
    ACCURACY,
    ENTROPY,
    EVAL_ACCURACY,
    FAILED,
    GRAD_NORM,
    KL,
    LENGTH,
    LOSS,
    MEMORY_GIB,
    PHASE_PREFIX,
    REWARD,
    STATUS_PREFIX,
    STEP_S,
    TRUNCATED,
    ZERO_VARIANCE,
    Diagnosis,
    RunRecord,
)

__all__ = ["ReportError", "default_path", "render_html", "report_line", "write_report"]


class ReportError(Exception):
    """The report cannot be drawn (the plotting library is missing) or written."""


# (panel title, [(metric, legend name)]) in the order a person reads a run
PANELS = [
    ("reward and accuracy", [(REWARD, "train reward"), (ACCURACY, "train accuracy"), (EVAL_ACCURACY, "eval accuracy")]),
    ("loss", [(LOSS, "loss")]),
    ("KL", [(KL, "KL")]),
    ("entropy", [(ENTROPY, "entropy")]),
    ("gradient norm", [(GRAD_NORM, "grad norm")]),
    ("response length (tokens)", [(LENGTH, "mean length")]),
    ("fractions", [(TRUNCATED, "truncated"), (ZERO_VARIANCE, "zero-variance groups"), (FAILED, "failed generations")]),
    ("rollouts by status", "statuses"),
    ("step time by phase (s)", "phases"),
    ("memory (GiB)", [(MEMORY_GIB, "peak memory")]),
]
# Marked on every curve: what happened to the run, not to the model's numbers.
MARKED = {
    # every check of grpo.checks under its own name (a new check is marked without an entry here) ...
    **{name: "#7f7f7f" for name in CHECKS},
    "server_failure": "#d62728", "server_gave_up": "#d62728", "server_unreachable": "#ff7f0e",
    "server_restart": "#9467bd", "restart": "#2ca02c", "rollback": "#8c564b", "stop": "#000000",
    "crash": "#000000", "interrupted": "#7f7f7f", "rollout_error": "#ff7f0e", "rank_lost": "#000000",
    "trip": "#ff7f0e", "samples_failed": "#ff7f0e",
    # ... in colours by kind: failures orange, rewards cyan and red, numerics pink
    "failed_rollouts": "#ff7f0e", "empty_responses": "#ff7f0e", "unscorable_rewards": "#bcbd22",
    "zero_reward": "#17becf", "zero_loss": "#17becf", "zero_variance": "#17becf", "reward_collapse": "#d62728",
    "nonfinite": "#e377c2", "kl_explosion": "#e377c2", "offpolicy_kl": "#e377c2", "grad_norm_spike": "#e377c2",
    "entropy_collapse": "#9467bd", "memory_growth": "#8c564b",
}
STATUS_COLORS = {"ok": "#2ca02c", "truncated": "#bcbd22", "failed": "#d62728", "timeout": "#ff7f0e",
                 "empty": "#7f7f7f", "unscorable": "#9467bd"}


def default_path(record: RunRecord) -> Path:
    if record.source == "grpo":
        return Path(record.path) / "report.html"
    where = Path(record.path)
    name = where.parent.name if where.is_file() else where.name
    return Path(f"{name or 'run'}-report.html")


def write_report(path: Path, out: Path | None = None) -> Path:
    """Write the report of the run at `path` (to `out`, or the default place) -> the file written.
    `grpo train` calls this at the end of a run and when the guard stops it."""
    diagnosis, record = examine(Path(path))
    target = Path(out) if out else default_path(record)
    page = render_html(diagnosis, record)
    try:
        atomic_write(target, page)
    except OSError as exc:
        raise ReportError(f"cannot write {target}: {exc}") from None
    return target


def report_line(run_dir: Path, enabled: bool = True) -> str:
    """The line `grpo train` prints at the end of a run and when the guard stops it: where the report
    is, or why there is none (the run's own outcome must not hang on its picture)."""
    if not enabled:
        return f"no report (logging.report=false): draw one with grpo report {run_dir}"
    try:
        return f"report: {write_report(run_dir)}"
    except (ReportError, UnreadableRun) as exc:
        return f"no report: {exc}"


def render_html(diagnosis: Diagnosis, record: RunRecord) -> str:
    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError:
        raise ReportError("the report needs plotly: pip install 'grpo[report]'") from None
    panels = [(title, spec) for title, spec in PANELS if _has(record, spec)]
    if not panels:
        figure_html = "<p>No step was logged: nothing to draw.</p>"
    else:
        fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, subplot_titles=[t for t, _ in panels],
                            vertical_spacing=0.04 if len(panels) > 6 else 0.07)
        for row, (_, spec) in enumerate(panels, 1):
            for trace in _traces(go, record, spec):
                fig.add_trace(trace, row=row, col=1)
        _mark_events(fig, go, diagnosis, record, len(panels))
        fig.update_layout(height=230 * len(panels) + 80, barmode="stack", hovermode="x unified",
                          margin={"l": 60, "r": 20, "t": 40, "b": 40}, legend={"orientation": "h", "y": 1.0,
                                                                               "yanchor": "bottom"},
                          template="plotly_white")
        fig.update_xaxes(title_text="step", row=len(panels), col=1)
        # include_plotlyjs=True writes plotly.js into the page: no CDN, no network
        figure_html = fig.to_html(full_html=False, include_plotlyjs=True, include_mathjax=False,
                                  config={"displaylogo": False, "responsive": True})
    return _PAGE.format(title=html.escape(f"{record.source} run {record.path}"), header=_header(diagnosis, record),
                        figure=figure_html)


def _has(record: RunRecord, spec) -> bool:
    if spec == "statuses":
        return any(k.startswith(STATUS_PREFIX) for m in record.metrics.values() for k in m)
    if spec == "phases":
        phases = any(k.startswith(PHASE_PREFIX) for m in record.metrics.values() for k in m)
        return phases or bool(record.series(STEP_S))
    return any(record.series(name) for name, _ in spec)


def _traces(go, record: RunRecord, spec) -> list:
    if spec in ("statuses", "phases"):
        prefix = STATUS_PREFIX if spec == "statuses" else PHASE_PREFIX
        names = sorted({k[len(prefix):] for m in record.metrics.values() for k in m if k.startswith(prefix)})
        if spec == "statuses":
            names.sort(key=lambda n: list(STATUS_COLORS).index(n) if n in STATUS_COLORS else 99)
        traces = []
        for name in names:
            points = record.series(prefix + name)
            color = STATUS_COLORS.get(name) if spec == "statuses" else None
            traces.append(go.Bar(x=[s for s, _ in points], y=[v for _, v in points], name=name, legendgroup=spec,
                                 marker_color=color))
        if spec == "phases" and not names:  # only the whole step's time is known
            points = record.series(STEP_S)
            traces.append(go.Bar(x=[s for s, _ in points], y=[v for _, v in points], name="step"))
        return traces
    traces = []
    for name, label in spec:
        points = record.series(name)
        if points:
            mode = "markers+lines" if name == EVAL_ACCURACY or len(points) < 30 else "lines"
            traces.append(go.Scatter(x=[s for s, _ in points], y=[v for _, v in points], name=label, mode=mode))
    return traces


def _mark_events(fig, go, diagnosis: Diagnosis, record: RunRecord, rows: int) -> None:
    seen: set[tuple[int, str]] = set()
    marks = []
    for mark in record.marks:
        if mark.kind in MARKED and (mark.step, mark.kind) not in seen:
            seen.add((mark.step, mark.kind))
            marks.append(mark)
    for mark in marks[:200]:
        fig.add_vline(x=mark.step, line_width=1, line_dash="dot", line_color=MARKED[mark.kind], row="all", col=1)
    if marks:
        top = max((v for m in record.metrics.values() for k, v in m.items() if k in (REWARD, ACCURACY)), default=1.0)
        fig.add_trace(go.Scatter(
            x=[m.step for m in marks], y=[top] * len(marks), mode="markers", name="events",
            marker={"symbol": "triangle-down", "size": 11, "color": [MARKED[m.kind] for m in marks]},
            text=[f"{m.kind}: {html.escape(m.detail[:160])}" for m in marks], hoverinfo="text+x"), row=1, col=1)
    if diagnosis.first_bad_step is not None:
        fig.add_vline(x=diagnosis.first_bad_step, line_width=2, line_color="#d62728", row="all", col=1)
        fig.add_annotation(x=diagnosis.first_bad_step, y=1.0, yref="y domain", showarrow=False, xanchor="left",
                           text=f"first bad step: {diagnosis.cause}", font={"color": "#d62728"}, row=1, col=1)


def _header(d: Diagnosis, record: RunRecord) -> str:
    color = "#2ca02c" if d.status == "healthy" else "#d62728"
    title = d.status if d.cause == "healthy" else f"{d.status}: {d.cause}"
    rows = [f'<h1 style="color:{color}">{html.escape(title)}'
            + (f" from step {d.first_bad_step}" if d.first_bad_step is not None else "") + "</h1>",
            f"<p class=explain>{html.escape(d.explanation)}</p>",
            "<table>",
            f"<tr><th>run</th><td>{html.escape(record.source)}: {html.escape(record.path)}</td></tr>",
            "<tr><th>last good checkpoint</th>"
            f"<td><code>{html.escape(d.last_good_checkpoint or 'none')}</code></td></tr>"]
    if d.resume:
        rows.append(f"<tr><th>resume</th><td><code>{html.escape(d.resume)}</code></td></tr>")
    steps = record.steps()
    rows.append(f"<tr><th>steps logged</th><td>{len(steps)}" + (f" ({steps[0]}-{steps[-1]})" if steps else "")
                + (f" of {record.total_steps}" if record.total_steps else "") + "</td></tr></table>")
    if d.evidence:
        items = "".join(f"<li><code>{html.escape(e.file)}:{e.line}</code> {html.escape(e.text[:300])}</li>"
                        for e in d.evidence)
        rows.append(f"<h2>evidence</h2><ul>{items}</ul>")
    if d.timeline:
        items = "".join(f"<tr><td>{a.step}</td><td>{html.escape(a.kind)}</td>"
                        f"<td>{html.escape(a.detail[:300])}</td></tr>" for a in d.timeline[:100])
        rows.append("<h2>timeline</h2><table class=timeline><tr><th>step</th><th>anomaly</th><th>detail</th></tr>"
                    f"{items}</table>")
    for note in record.notes:
        rows.append(f"<p class=note>{html.escape(note)}</p>")
    return "\n".join(rows)


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; }}
h1 {{ font-size: 1.5em; margin-bottom: 4px; }} h2 {{ font-size: 1.1em; margin: 16px 0 4px; }}
table {{ border-collapse: collapse; }} th, td {{ text-align: left; padding: 2px 10px 2px 0; vertical-align: top; }}
.timeline td, .timeline th {{ border-bottom: 1px solid #eee; }}
code {{ background: #f4f4f4; padding: 1px 4px; word-break: break-all; }} .note {{ color: #777; }}
</style></head>
<body>
<header>
{header}
</header>
<main>
{figure}
</main>
</body></html>
"""
