"""The dashboard in a real browser: headless Chromium loads `/` from a live server under traffic.

Chromium is found on PATH, or installed with apt-get (Debian's `chromium` package) when missing; the
test skips, saying why, only where neither works. Deselect it with `-m "not browser"`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from grps_py.app_metrics import app_monitor
from support import TESTS, ServerThread

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]  # the first run may install Chromium

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
OUTPUT = TESTS / "output"
PREDICT = "/grps/v1/infer/predict"
# The series the page draws, each once: these when the server has them, and every GPU's two.
CHARTED = {
    "qps",
    "fail_rate(%)",
    "latency_cdf(ms)",
    "queue_time_avg(ms)",
    "batch_size_avg",
    "cpu_usage(%)",
    "mem_usage(%)",
}
USER_COUNT, USER_CDF = "dashboard_requests", "dashboard_ms"  # user metrics (app_monitor)
GPU_SERIES = re.compile(r"gpu\d+_(mem_)?usage\((%|MIB)\)")
CHART = re.compile(r'<svg[^>]*\bdata-series="([^"]+)"[^>]*\bdata-points="(\d+)"')


def find_browser() -> str | None:
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def apt_install(packages: list[str]) -> str:
    """Install with apt-get (updating its lists first if the package is unknown); '' or why it failed."""
    if shutil.which("apt-get") is None:
        return "no apt-get on this machine"
    if os.geteuid() != 0:
        return "not root, so apt-get cannot install it"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    result = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=300)
        result = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
    return "" if result.returncode == 0 else f"apt-get install failed: {result.stderr.strip()[-300:]}"


@pytest.fixture(scope="session")
def chromium() -> str:
    browser = find_browser()
    if browser is None:
        why = apt_install(["chromium", "fonts-dejavu-core"])
        browser = find_browser()
        if browser is None:
            pytest.skip(f"needs Chromium, which is not installed and could not be: {why or 'not on PATH'}")
    try:  # a stub (Ubuntu's snap wrapper in a container) is found but cannot run
        subprocess.run([browser, "--version"], capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"{browser} does not run here: {exc}")
    return browser


class Traffic:
    """Predictions in a background thread, one in five failing, until stopped."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=10) as client:
            while not self._stop.is_set():
                model = "raiser-1.0" if self.sent % 5 == 4 else "echo-1.0"
                began = time.perf_counter()
                client.post(PREDICT, json={"model": model, "str_data": "dashboard"})
                self.sent += 1
                # What model code records through grps's app_monitor (the server is in this process).
                app_monitor.inc(USER_COUNT, 1)
                app_monitor.cdf(USER_CDF, (time.perf_counter() - began) * 1e3)
                time.sleep(0.01)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def traffic(basic_server: ServerThread) -> Iterator[Traffic]:
    with Traffic(basic_server.http_url) as running:
        wait_for_data(basic_server.http_url)
        yield running


def wait_for_data(base_url: str, timeout_s: float = 15) -> None:
    """Until the last minute's QPS shows the traffic (a second must close before it is reported)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reply = httpx.get(f"{base_url}/grps/v1/monitor/series", params={"name": "qps"}, timeout=10)
        if any(point["v"] for point in reply.json()["points"]):
            return
        time.sleep(0.25)
    raise AssertionError("no QPS in the series after sending traffic")


def run_browser(browser: str, profile: Path, url: str, *args: str) -> str:
    """Load `url` headless, let the page run 5 s of (virtual) time, and return what Chromium printed."""
    command = [
        browser,
        "--headless",
        "--no-sandbox",  # run as root in containers
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--window-size=1280,1000",
        "--virtual-time-budget=5000",
        *args,
        url,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def charts_in(dom: str) -> dict[str, int]:
    return {name: int(points) for name, points in CHART.findall(dom)}


def test_dashboard_draws_live_charts(
    chromium: str, basic_server: ServerThread, traffic: Traffic, tmp_path: Path
) -> None:
    page = f"{basic_server.http_url}/"
    dom = run_browser(chromium, tmp_path / "profile", page, "--dump-dom")
    charts = charts_in(dom)
    meta = httpx.get(f"{basic_server.http_url}/grps/v1/monitor/models", timeout=10).json()
    builtin = {name for name in meta["names"] if name in CHARTED or GPU_SERIES.fullmatch(name)}
    assert set(charts) == builtin | set(meta["user_metrics"]), dom
    assert charts["qps"] > 0 and charts["latency_cdf(ms)"] > 0, charts
    assert charts[USER_COUNT] > 0 and charts[USER_CDF] > 0, charts  # user metrics, per second
    assert re.search(r'id="status"[^>]*>updated ', dom), "the page never finished an update"
    assert '<option value="echo-1.0">echo-1.0</option>' in dom  # the model selector lists the models

    per_model = charts_in(run_browser(chromium, tmp_path / "profile", page + "#model=echo-1.0", "--dump-dom"))
    assert per_model["qps"] > 0 and per_model["latency_cdf(ms)"] > 0, per_model

    shot = tmp_path / "dashboard.png"
    run_browser(chromium, tmp_path / "profile", page, f"--screenshot={shot}")
    assert shot.stat().st_size > 10_000  # a rendered page, not a blank one
    OUTPUT.mkdir(exist_ok=True)
    shutil.copyfile(shot, OUTPUT / "dashboard.png")
