"""Helpers for the service tests: call the ASGI app in-process, run the CLI's --json, start uvicorn."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

from click.testing import CliRunner

from .helpers import REPO, SRC_PATH


def call(app: Any, method: str, path: str, body: Any = None, content: bytes | None = None,
         headers: dict[str, str] | None = None) -> Any:
    """One request through httpx's ASGI transport (no sockets); returns the httpx response."""
    import httpx

    async def go() -> Any:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://test") as client:
            kw: dict[str, Any] = {"headers": headers}
            if content is not None:
                kw["content"] = content
            elif body is not None:
                kw["json"] = body
            return await client.request(method, path, **kw)

    return asyncio.run(go())


def cli_json(*args: str) -> Any:
    """``wattgpu ARGS --json`` in-process; its stdout parsed."""
    from wattgpu.cli import main

    res = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)
    assert res.exit_code == 0, (args, res.output)
    return json.loads(res.stdout)


def cli_error(*args: str) -> str:
    """The one ``error:`` line ``wattgpu ARGS`` prints on a bad input (the message, without ``error: ``)."""
    from wattgpu.cli import main

    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert res.exit_code == 2, (args, res.output)
    line = res.stderr.strip().splitlines()[-1]
    assert line.startswith("error: "), line
    return line[len("error: "):]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int, extra_env: dict[str, str] | None = None, workers: int = 1) -> subprocess.Popen[bytes]:
    """``wattgpu serve`` on 127.0.0.1:``port``, waited for until /healthz answers (loopback only)."""
    import httpx

    env = {**os.environ, "PYTHONPATH": SRC_PATH, **(extra_env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "wattgpu.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--workers", str(workers)], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"wattgpu serve exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("wattgpu serve did not answer /healthz within 60 s")
