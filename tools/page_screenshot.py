#!/usr/bin/env python
"""Regenerate docs/service_page.png: the page at ``/`` as a user sees it, from the shipped models.

    python tools/page_screenshot.py [--out docs/service_page.png]

Starts ``wattgpu serve`` (the interpreter's own, so the ``serve`` extra must be installed) on a free
loopback port, lets headless Chromium (Debian's ``chromium``) load the page with a preloaded query and
run it, and saves the screenshot (eight GPUs from a PCIe card to an H200, so table, plot and the
exclusion list all show).
"""
from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

REPO = Path(__file__).resolve().parents[1]
QUERY = {"llm": "meta-llama/Llama-3.1-8B-Instruct", "kind": "server", "qps": "2", "max_itl_ms": "50",
         "gpus": "A10,A30,RTX A5000,L40S,A100 SXM4 80GB,H200 SXM,H100 SXM,L4"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the server at {url} did not answer /healthz within {timeout_s:.0f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "service_page.png")
    ap.add_argument("--size", default="1200,2050", help="window width,height in CSS pixels")
    args = ap.parse_args()
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        raise SystemExit("chromium is not installed: apt-get install -y chromium")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "wattgpu.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_healthy(url)
        with tempfile.TemporaryDirectory() as profile:
            res = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                  f"--user-data-dir={profile}", "--virtual-time-budget=20000",
                                  f"--window-size={args.size}", f"--screenshot={args.out.resolve()}",
                                  f"{url}/?{urlencode(QUERY)}"],
                                 capture_output=True, text=True, timeout=120, env={"HOME": profile, "PATH": "/usr/bin:/bin"})
        if res.returncode != 0 or not args.out.exists():
            raise SystemExit(f"chromium failed ({res.returncode}): {res.stderr[-2000:]}")
    finally:
        server.terminate()
        server.wait(timeout=20)
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
