"""The service over real sockets (slow tier): uvicorn on 127.0.0.1, 200 concurrent clients, and the page
in headless Chromium (Debian's ``chromium`` package; .ci/run installs it when it is missing)."""
from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from typing import Any, Iterator
from urllib.parse import urlencode

import pytest

pytest.importorskip("uvicorn", reason="the live service tests need the serve extra: pip install -e '.[serve]'")
httpx = pytest.importorskip("httpx", reason="the live service tests need httpx (in the test extra)")

from .service_helpers import free_port, start_server  # noqa: E402

pytestmark = pytest.mark.slow
LLM = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    port = free_port()
    proc = start_server(port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_200_concurrent_requests_over_loopback(base: str) -> None:
    bodies = [("/v1/predict", {"gpu": g, "llm": LLM, "workload": {"qps": q}}) for g in ("A30", "L40S", "L4")
              for q in (0.2, 1.0, 3.0)] + [("/v1/rank", {"llm": LLM, "gpus": ["A30", "L4", "H100 SXM"]})]

    async def go() -> list[Any]:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120) as c:
            return await asyncio.gather(*(c.post(p, json=b) for p, b in (bodies[i % len(bodies)] for i in range(200))))

    out = asyncio.run(go())
    assert [r.status_code for r in out] == [200] * 200, [r.text[:200] for r in out if r.status_code != 200][:3]


def test_a_valid_request_is_answered_while_300_clients_stall_their_uploads(base: str) -> None:
    """Issue 40's target: bodies still arriving hold no computing slot, so 300 stalled uploads (more than the
    256 admission slots) leave a valid request its answer within a second."""
    host, port = base.rsplit("//", 1)[1].split(":")
    body = b'{"gpu": "A30", "llm": "meta-llama/Llama-3.1-8B-Instruct"}'

    async def go() -> tuple[bytes, float]:
        writers = []
        for _ in range(300):
            _, w = await asyncio.open_connection(host, int(port))
            w.write(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body[:6]))
            writers.append(w)
        await asyncio.gather(*(w.drain() for w in writers))
        await asyncio.sleep(0.5)
        t0 = asyncio.get_running_loop().time()
        r, w = await asyncio.open_connection(host, int(port))
        w.write(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        head = await asyncio.wait_for(r.read(64), 10)
        took = asyncio.get_running_loop().time() - t0
        for x in (*writers, w):
            x.close()
        return head, took

    head, took = asyncio.run(go())
    assert head.startswith(b"HTTP/1.1 200"), head
    assert took < 1.0, took


class _Rows(HTMLParser):
    """The rows of ``<table id="ranked">``: per cell, its text and its ``data-value``."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[tuple[str, str | None]]] = []
        self._in_table = self._in_body = False
        self._cell: list[str] | None = None
        self._value: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and a.get("id") == "ranked":
            self._in_table = True
        elif self._in_table and tag == "tbody":
            self._in_body = True
        elif self._in_body and tag == "tr":
            self.rows.append([])
        elif self._in_body and tag == "td":
            self._cell, self._value = [], a.get("data-value")

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.rows[-1].append(("".join(self._cell), self._value))
            self._cell = None
        elif tag == "table":
            self._in_table = self._in_body = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium); .ci/run installs it")
    return exe


def test_page_in_chromium_shows_the_apis_ranking(base: str) -> None:
    exe = _chromium()
    query = {"llm": LLM, "kind": "server", "qps": "2", "max_itl_ms": "50", "gpus": "A30,L4,L40S,A10,H100 SXM",
             "run": "1"}
    with tempfile.TemporaryDirectory() as profile:
        res = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                              "--virtual-time-budget=20000", "--dump-dom", f"{base}/?{urlencode(query)}"],
                             capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": profile})
    assert res.returncode == 0, res.stderr[-2000:]
    parser = _Rows()
    parser.feed(res.stdout)
    api = httpx.post(f"{base}/v1/rank", json={"llm": LLM, "workload": {"kind": "server", "qps": 2},
                                              "sla": {"max_itl_ms": 50},
                                              "gpus": ["A30", "L4", "L40S", "A10", "H100 SXM"]}, timeout=60).json()
    assert api["candidates"], api
    assert len(parser.rows) == len(api["candidates"]), res.stdout[-3000:]
    for row, c in zip(parser.rows, api["candidates"]):
        rank, gpu, tp, replicas, power, energy, itl, ttft, cap, launch = row
        assert gpu[0] == c["gpu"]
        # data-value holds the number the page was given (JavaScript's shortest round-trip text)
        assert float(rank[1] or "nan") == c["rank"] and float(tp[1] or "nan") == c["tp"]
        assert float(replicas[1] or "nan") == c["replicas"] and float(cap[1] or "nan") == c["max_batch"]
        assert float(power[1] or "nan") == c["total_power_w"]
        assert float(energy[1] or "nan") == c["energy"]["j_per_token"]
        assert float(itl[1] or "nan") == c["itl_s"]
        assert float(ttft[1] or "nan") == c["ttft_s"]
        assert power[0] == f"{c['total_power_w']:.0f}" and itl[0] == f"{c['itl_s'] * 1e3:.1f}"
        assert launch[0].startswith("vllm serve ") and c["gpu"] and LLM in launch[0]
    assert "<svg" in res.stdout and res.stdout.count("<circle") == len(api["candidates"])
