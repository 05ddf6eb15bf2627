"""The service's edges (issue 40 item 2): stalled uploads never hold a computing slot, one client holds at
most its share of the upload slots, a client that leaves mid-body leaves no traceback, a timed-out batch
stops, late headers get 408, and `serve` on a busy port is a one-line error."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
import time
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the service tests need the serve extra: pip install -e '.[serve]'")
uvicorn = pytest.importorskip("uvicorn", reason="the service tests need the serve extra: pip install -e '.[serve]'")

from wattgpu.errors import WattGPUError  # noqa: E402
from wattgpu.service import create_app  # noqa: E402
from wattgpu.service.asgi import Gate  # noqa: E402
from wattgpu.service.protocol import protocol_class  # noqa: E402
from wattgpu.service.run import bind  # noqa: E402

from .service_helpers import free_port, start_server  # noqa: E402

LLM = "meta-llama/Llama-3.1-8B-Instruct"
BODY = json.dumps({"gpu": "A30", "llm": LLM}).encode()


def _scope(client: str = "10.0.0.1", path: str = "/v1/predict") -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())],
            "client": (client, 1234), "server": ("127.0.0.1", 80)}


async def _request(app: Any, receive: Any, client: str = "10.0.0.1") -> tuple[int, bytes]:
    """One raw ASGI request with the given ``receive``; the status and body the app sent."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(_scope(client), receive, send)
    status = next((m["status"] for m in sent if m["type"] == "http.response.start"), 0)
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def _whole_body() -> Any:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": BODY, "more_body": False}
    return receive


def _stalled(release: asyncio.Event) -> Any:
    """A body that sends its first bytes and then nothing until ``release`` (then the client leaves)."""
    first = [True]

    async def receive() -> dict[str, Any]:
        if first[0]:
            first[0] = False
            return {"type": "http.request", "body": BODY[:5], "more_body": True}
        await release.wait()
        return {"type": "http.disconnect"}
    return receive


def test_gate_gives_each_client_a_share() -> None:
    gate = Gate(4, share=2)
    assert gate.enter("a") and gate.enter("a")
    assert not gate.enter("a")  # a's share is used up …
    assert gate.enter("b") and gate.enter("b")  # … but b still gets in
    assert not gate.enter("c")  # the total bound
    gate.leave("a")
    assert gate.enter("c")
    for c in ("a", "b", "b", "c"):
        gate.leave(c)
    assert gate.count == 0 and gate.by_client == {}


def test_stalled_uploads_hold_no_computing_slot_and_leave_no_traceback(caplog: Any) -> None:
    app = create_app(max_in_flight=2)  # default upload bounds: 1,024 in all, 512 per client
    svc = app.state.service

    async def go() -> tuple[list[tuple[int, bytes]], tuple[int, bytes], int, int]:
        release = asyncio.Event()
        stalls = [asyncio.create_task(_request(app, _stalled(release), "10.0.0.9")) for _ in range(300)]
        await asyncio.sleep(0.2)
        reading, computing = svc.uploads.count, svc.gate.count
        valid = await asyncio.wait_for(_request(app, _whole_body(), "10.0.0.9"), 30)
        release.set()  # the stalled clients leave
        return await asyncio.gather(*stalls), valid, reading, computing

    with caplog.at_level(logging.DEBUG):
        stalled, valid, reading, computing = asyncio.run(go())
    assert (reading, computing) == (300, 0)  # 300 bodies arriving, no computing slot taken
    assert valid[0] == 200, valid[1][:300]
    assert all(status == 400 for status, _ in stalled)  # answered to nobody; the client left
    assert svc.uploads.count == 0 and svc.gate.count == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text[:2000]


def test_one_client_cannot_take_every_upload_slot() -> None:
    app = create_app(max_uploads=4, upload_share=2)

    async def go() -> tuple[tuple[int, bytes], tuple[int, bytes]]:
        release = asyncio.Event()
        stalls = [asyncio.create_task(_request(app, _stalled(release), "10.0.0.9")) for _ in range(2)]
        await asyncio.sleep(0.1)
        same = await _request(app, _stalled(release), "10.0.0.9")
        other = await asyncio.wait_for(_request(app, _whole_body(), "10.0.0.7"), 30)
        release.set()
        await asyncio.gather(*stalls)
        return same, other

    same, other = asyncio.run(go())
    assert same[0] == 503 and json.loads(same[1])["error"]["kind"] == "busy"
    assert "10.0.0.9" in json.loads(same[1])["error"]["message"]
    assert other[0] == 200


def test_a_body_that_never_finishes_gets_408() -> None:
    app = create_app(body_timeout_s=0.2)

    async def go() -> tuple[int, bytes]:
        return await _request(app, _stalled(asyncio.Event()))

    status, body = asyncio.run(go())
    assert status == 408 and json.loads(body)["error"]["field"] == "<body>"
    assert app.state.service.uploads.count == 0


def test_a_timed_out_batch_stops_working() -> None:
    app = create_app(timeout_s=0.3)
    svc = app.state.service
    real = svc.predictor()
    calls = [0]

    class Slow:
        catalog = real.catalog

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def predict_specs_safe(self, triples: Any) -> Any:
            calls[0] += 1
            time.sleep(0.2)
            return real.predict_specs_safe(triples)

    svc._predictor = Slow()
    rows = [{"gpu": "A30", "llm": LLM, "workload": {"max_batch": 1 + k % 64}} for k in range(8000)]
    body = json.dumps({"rows": rows}).encode()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def go() -> tuple[int, bytes]:
        sent: list[dict[str, Any]] = []

        async def send(m: dict[str, Any]) -> None:
            sent.append(m)
        scope = _scope(path="/v1/predict/batch")
        scope["headers"] = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await app(scope, receive, send)
        return (next(m["status"] for m in sent if m["type"] == "http.response.start"),
                b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))

    status, _ = asyncio.run(go())
    assert status == 504
    for _ in range(100):  # the job notices within one chunk
        if svc.gate.count == 0:
            break
        time.sleep(0.05)
    assert svc.gate.count == 0
    assert calls[0] < 8  # 8 chunks of 1,000 rows; it stopped before the end


def _serve_in_thread(header_timeout_s: float) -> tuple[Any, int, threading.Thread]:
    port = free_port()
    config = uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning",
                            http=protocol_class(header_timeout_s), timeout_keep_alive=5)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    assert server.started
    return server, port, thread


def test_late_headers_get_408_and_the_connection_closes() -> None:
    server, port, thread = _serve_in_thread(0.5)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\n")
            t0 = time.monotonic()
            for _ in range(3):  # trickling header bytes does not extend the deadline
                time.sleep(0.2)
                try:
                    s.sendall(b"X-A: b\r\n")
                except OSError:
                    break
            data = s.recv(4096)
            assert data.startswith(b"HTTP/1.1 408"), data[:100]
            assert time.monotonic() - t0 < 3
            assert b'"field":"<headers>"' in data
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # a prompt request is served
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        server.should_exit = True
        thread.join(10)


def test_serve_on_a_busy_port_is_a_one_line_error() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(WattGPUError) as err:
            bind("127.0.0.1", port)
    assert err.value.exit_code == 2
    assert f"127.0.0.1:{port}" in str(err.value) and "--port" in str(err.value)


def _children(pid: int) -> list[int]:
    """Process ids whose parent is ``pid`` (from /proc: Linux, where the service tests run)."""
    from pathlib import Path

    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.slow
def test_serve_with_two_workers_answers_on_one_port_and_stops_them_all() -> None:
    import signal

    import httpx

    port = free_port()
    proc = start_server(port, workers=2)
    try:
        workers = [c for c in _children(proc.pid) if "spawn" in open(f"/proc/{c}/cmdline").read()]
        assert len(workers) == 2, workers
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            answers = [client.post("/v1/predict", json={"gpu": "A30", "llm": LLM}).status_code for _ in range(8)]
        assert answers == [200] * 8
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert all(not os.path.exists(f"/proc/{w}") or "Z" in open(f"/proc/{w}/stat").read().split()[2] for w in workers)


def test_the_bound_socket_is_tcp_so_answers_are_not_held_by_nagle() -> None:
    """asyncio turns Nagle off (TCP_NODELAY) only for sockets whose proto is IPPROTO_TCP; a socket made with
    proto 0 left every keep-alive answer waiting for the client's delayed ACK (~40 ms each)."""
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
