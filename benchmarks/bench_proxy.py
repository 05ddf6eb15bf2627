#!/usr/bin/env python3
"""N service workers behind nginx (issue 40): the deployment docs/service.md describes, under load.

    python benchmarks/bench_proxy.py [--workers 1,2] [--quick] [--report reports/benchmarks.md]

For each N it starts ``wattgpu serve --workers N`` on a loopback port and nginx (found on PATH, run in
the foreground from a temporary prefix) as a reverse proxy in front of it with keep-alive upstream
connections, then measures through the proxy with bench_service's client: predict throughput and
latency (offline / closed-loop bodies, 16 connections), server-workload predicts, whole-catalog ranks,
and 200 concurrent requests. Loopback only; every loop is bounded. The machine's load average is
reported beside the figures (the build machine is shared: ratios between N are the figures to read).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import (PREDICT_BODIES, RANK_BODIES, SERVER_BODIES, concurrent_burst,  # noqa: E402
                           free_port, run_load, start_server, wait_listening, write_report)

START, END = "<!-- bench_proxy:start -->", "<!-- bench_proxy:end -->"

NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 1;
user root;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    client_header_timeout 10s;
    client_body_timeout 10s;
    client_max_body_size 1m;
    keepalive_timeout 5s;
    upstream wattgpu {{ server 127.0.0.1:{upstream}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://wattgpu;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_read_timeout 35s;
        }}
    }}
}}
"""


def start_nginx(prefix: Path, port: int, upstream: int) -> subprocess.Popen[bytes]:
    """nginx in the foreground on ``port``, proxying to ``upstream``; waits until it listens."""
    nginx = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx")
                                           if os.path.exists(p)), None)
    if nginx is None:
        raise SystemExit("nginx is not installed (Debian: apt-get install nginx-light)")
    conf = prefix / "nginx.conf"
    conf.write_text(NGINX_CONF.format(prefix=prefix, port=port, upstream=upstream), encoding="utf-8")
    proc = subprocess.Popen([nginx, "-p", str(prefix), "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    return wait_listening(proc, port, "nginx", 20)


def measure(workers: int, quick: bool) -> dict[str, Any]:
    """The load figures through nginx in front of ``wattgpu serve --workers N``."""
    upstream, port = free_port(), free_port()
    load_before = os.getloadavg()
    server = start_server(upstream, workers)
    with tempfile.TemporaryDirectory(prefix="wattgpu-nginx-") as tmp:
        proxy = start_nginx(Path(tmp), port, upstream)
        try:
            run_load(port, "/v1/predict", PREDICT_BODIES, 200 * workers, 4 * workers)  # warm every worker
            run_load(port, "/v1/rank", RANK_BODIES, 4 * workers, 2 * workers)
            out: dict[str, Any] = {"workers": workers, "burst_200": concurrent_burst(port)}
            out["predict"] = run_load(port, "/v1/predict", PREDICT_BODIES, 300 if quick else 10_000, 16)
            out["predict_server"] = run_load(port, "/v1/predict", SERVER_BODIES, 20 if quick else 300, 8)
            out["rank"] = run_load(port, "/v1/rank", RANK_BODIES, 10 if quick else 150, 4)
        finally:
            proxy.terminate()
            proxy.wait(timeout=20)
            server.terminate()
            server.wait(timeout=30)
    out["loadavg_before"], out["loadavg_after"] = load_before, os.getloadavg()
    return out


def markdown(runs: list[dict[str, Any]]) -> str:
    nginx = subprocess.run([shutil.which("nginx") or "/usr/sbin/nginx", "-v"], capture_output=True, text=True).stderr
    lines = [START, "## Issue 40: N workers behind a reverse proxy (`python benchmarks/bench_proxy.py`)", "",
             f"`wattgpu serve --workers N` behind nginx ({nginx.strip().split('/')[-1]}, one nginx worker, keep-alive "
             f"upstream connections, the configuration in the script), client and servers on the same "
             f"{os.cpu_count()}-CPU machine, loopback only. Run {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC. "
             "The machine was shared with other sessions: the load average is given per run.", "",
             "| workers | load avg before → after | 200 concurrent | predict req/s (p50 / p99 ms) | "
             "server-workload predict req/s | whole-catalog rank req/s (p50 ms) | errors |",
             "|---:|---|---|---|---|---|---:|"]
    for r in runs:
        p, q, k, b = r["predict"], r["predict_server"], r["rank"], r["burst_200"]
        errs = sum(r[x]["errors"] for x in ("burst_200", "predict", "predict_server", "rank"))
        lines.append(f"| {r['workers']} | {r['loadavg_before'][0]:.1f} → {r['loadavg_after'][0]:.1f} | "
                     f"{b['requests'] - b['errors']}/200 in {b['wall_s']:.2f} s | **{p['requests_per_s']:.0f}** "
                     f"({p['p50_ms']:.1f} / {p['p99_ms']:.1f}) | {q['requests_per_s']:.0f} | "
                     f"{k['requests_per_s']:.1f} ({k['p50_ms']:.0f}) | {errs} |")
    lines += ["", "Raw figures: `reports/bench_proxy.json`.", END]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts to measure")
    ap.add_argument("--quick", action="store_true", help="a few hundred requests")
    ap.add_argument("--out", default=None, help="write the raw figures as JSON here")
    ap.add_argument("--report", default=None, help="replace the proxy section of this markdown file")
    args = ap.parse_args(argv)
    runs = [measure(int(n), args.quick) for n in args.workers.split(",")]
    text = markdown(runs)
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps(runs, indent=2) + "\n", encoding="utf-8")
    if args.report:
        write_report(Path(args.report), text, START, END)
    return 1 if any(r[x]["errors"] for r in runs for x in ("burst_200", "predict", "predict_server", "rank")) else 0


if __name__ == "__main__":
    sys.exit(main())
