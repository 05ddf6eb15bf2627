"""benchmarks/bench_service.py runs end to end in --quick mode (slow tier): uvicorn on loopback, a burst
of 200 concurrent requests with no error, and every figure reported. No timing is asserted."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("uvicorn", reason="the service benchmark needs the serve extra: pip install -e '.[serve]'")

from .helpers import REPO  # noqa: E402

pytestmark = pytest.mark.slow


def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    out, report = tmp_path / "bench.json", tmp_path / "benchmarks.md"
    report.write_text("# Runtime benchmarks\n\nintro\n\n## Older section\n\nkept\n")
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_service.py"), "--quick", "--out", str(out),
                          "--report", str(report)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["burst_200"]["requests"] == 200 and r["burst_200"]["errors"] == 0
    for name in ("predict", "predict_server", "rank"):
        assert r[name]["errors"] == 0
        assert all(math.isfinite(r[name][k]) and r[name][k] > 0 for k in ("requests_per_s", "p50_ms", "p99_ms"))
        assert r[name]["p50_ms"] <= r[name]["p99_ms"]
    assert len(r["rss"]["rss_mb"]) >= 2 and r["rss"]["errors"] == 0
    text = report.read_text()
    assert "## Older section\n\nkept" in text and "requests/s" in text  # the rest of the file is kept
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_service.py"), "--quick", "--report", str(report)],
                   capture_output=True, text=True, timeout=600, check=True)
    assert report.read_text().count("bench_service:start") == 1  # a rerun replaces its section


def test_the_proxy_benchmark_runs_two_workers_behind_nginx(tmp_path: Path) -> None:
    import shutil

    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        pytest.skip("nginx is not installed (.ci/run installs Debian's nginx-light)")
    out = tmp_path / "proxy.json"
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_proxy.py"), "--quick", "--workers", "1,2",
                          "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    runs = json.loads(out.read_text())
    assert [r["workers"] for r in runs] == [1, 2]
    for r in runs:
        assert r["burst_200"]["errors"] == 0
        assert all(r[k]["errors"] == 0 and r[k]["requests_per_s"] > 0 for k in ("predict", "predict_server", "rank"))
    assert "| 2 |" in res.stdout
