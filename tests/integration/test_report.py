"""`grpo report`: one HTML file that opens offline. Debian's headless chromium renders it, a
screenshot shows the diagnosis and drawn curves, and the browser's network log shows the page asked
for nothing from the network (a page that does ask is caught by the same check)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from grpo.cli import main
from grpo.config import load_config
from grpo.errors import RunStopped

from .helpers import make_loop

SAMPLES = Path(__file__).resolve().parents[1] / "unit" / "tools" / "doctor" / "samples"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install -y "
                                                             "chromium; .ci/run installs it)")


def render(page: Path, tmp_path: Path) -> tuple[Image.Image, list[str]]:
    """Screenshot `page` in headless chromium -> (the image, every URL the page itself requested)."""
    shot, netlog = tmp_path / f"{page.stem}.png", tmp_path / f"{page.stem}.netlog.json"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2000",
                    "--virtual-time-budget=10000", f"--log-net-log={netlog}", "--net-log-capture-mode=Everything",
                    f"--screenshot={shot}", page.resolve().as_uri()],
                   capture_output=True, text=True, timeout=180, check=True)
    log = json.loads(netlog.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    # The browser's own traffic (update checks, accounts) has no page behind it; the page's
    # requests carry the file:// origin in their network isolation key.
    from_page = [e["params"]["url"] for e in log["events"] if e["type"] == start_job and "url" in e.get("params", {})
                 and "file://" in e["params"].get("network_isolation_key", "")]
    return Image.open(shot).convert("RGB"), from_page


def pixels(image: Image.Image) -> list[tuple[int, int, int]]:
    data = image.tobytes()  # RGB
    return [tuple(data[i:i + 3]) for i in range(0, len(data), 3)]


def colored_fraction(image: Image.Image) -> float:
    """Pixels that are neither white nor grey: drawn curves, bars and the red diagnosis."""
    small = pixels(image.resize((image.width // 4, image.height // 4)))
    return sum(1 for r, g, b in small if max(r, g, b) - min(r, g, b) > 40) / len(small)


@needs_chromium
def test_the_report_of_an_areal_run_renders_offline_with_curves_and_asks_nothing_of_the_network(tmp_path, capsys):
    out = tmp_path / "areal.html"
    assert main(["report", str(SAMPLES / "areal"), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    page = out.read_text()
    assert "server_failure from step 42" in page and "epoch0epochstep39globalstep39" in page
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=[\"']?https?:", page)
    image, requests = render(out, tmp_path)
    assert requests == []
    top, curves = image.crop((0, 0, image.width, 300)), image.crop((0, 700, image.width, image.height))
    assert len(set(pixels(top))) > 20  # text was drawn
    assert colored_fraction(curves) > 0.01, "the curves did not draw: plotly.js did not run offline"


@needs_chromium
def test_the_network_check_catches_a_page_that_asks(tmp_path):
    probe = tmp_path / "probe.html"
    probe.write_text('<html><body><h1>probe</h1><img src="http://127.0.0.1:9/pixel.png">'
                     '<script src="https://cdn.plot.ly/plotly-2.35.2.min.js"></script></body></html>')
    _, requests = render(probe, tmp_path)
    assert "http://127.0.0.1:9/pixel.png" in requests and "https://cdn.plot.ly/plotly-2.35.2.min.js" in requests


def test_a_stopped_grpo_run_gets_its_report_in_its_directory(tmp_path, capsys):
    run_dir = tmp_path / "r"
    with pytest.raises(RunStopped):
        make_loop(load_config("tiny", [f"run_dir={run_dir}", "train.steps=6", "rollout.max_retries=0",
                                       "testing.faults.fail_rollouts_at_steps=[4,5,6]",
                                       "guard.failed_rollouts.action=stop"])).train()
    assert main(["report", str(run_dir)]) == 0
    page = (run_dir / "report.html").read_text()
    assert "rollout_failure from step 4" in page and "step_000003" in page
    for title in ("reward and accuracy", "loss", "entropy", "rollouts by status", "step time by phase", "memory"):
        assert title in page
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("sample, shown", [("verl/train.log", "policy_collapse from step 44"),
                                           ("trl/output", "no_learning_signal from step 34")])
def test_reports_of_verl_and_trl_runs(tmp_path, sample, shown):
    from grpo.tools.report import report_line

    out = tmp_path / "r.html"
    assert main(["report", str(SAMPLES / sample), "--out", str(out)]) == 0
    page = out.read_text()
    assert shown in page and "reward and accuracy" in page and "entropy" in page
    assert report_line(tmp_path / "missing") == f"no report: {tmp_path / 'missing'} does not exist"
