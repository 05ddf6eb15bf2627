"""``wattgpu serve``: run the app under uvicorn, with a one-line error when the extra is missing or the
address cannot be bound."""
from __future__ import annotations

import socket
from typing import Any

from ..errors import WattGPUError

LIMIT_CONCURRENCY = 2048  # open connections + tasks uvicorn accepts before answering 503 itself


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or a one-line error naming the option to change."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP; without it every
    # keep-alive answer waited ~40 ms for the client's delayed ACK (22 requests/s on one connection, not 1,100)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        raise WattGPUError(f"--host/--port: cannot listen on {host}:{port} ({reason}); pick another --port "
                           "or stop the process that holds it") from None
    sock.set_inheritable(True)
    return sock


def _run(sock: socket.socket, app: Any) -> None:
    """Serve ``app`` on the listening socket until interrupted (uvicorn, the header-deadline protocol)."""
    import uvicorn

    from .protocol import protocol_class

    config = uvicorn.Config(app, log_level="info", access_log=False, timeout_keep_alive=5,
                            http=protocol_class(), limit_concurrency=LIMIT_CONCURRENCY)
    uvicorn.Server(config).run(sockets=[sock])


def _run_worker(sock: socket.socket, models: str | None) -> None:
    """One worker process on the shared socket: its own app, predictor and event loop."""
    from .asgi import create_app

    _run(sock, create_app(models))


def _supervise(sock: socket.socket, models: str | None, workers: int) -> None:
    """``workers`` spawned processes serving one socket (the kernel spreads connections); a worker that
    dies is not restarted: the supervisor stops the others and exits, so a process manager sees it."""
    import multiprocessing as mp
    import signal

    ctx = mp.get_context("spawn")  # a fresh interpreter each: no onnxruntime thread pool crosses a fork
    procs = [ctx.Process(target=_run_worker, args=(sock, models), name=f"wattgpu-worker-{i}", daemon=False)
             for i in range(workers)]
    for p in procs:
        p.start()

    def stop(*_: object) -> None:
        for p in procs:
            if p.is_alive():
                p.terminate()

    signal.signal(signal.SIGTERM, stop)
    try:
        while all(p.is_alive() for p in procs):
            procs[0].join(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        stop()
        for p in procs:
            p.join(10)


def serve(host: str, port: int, models: str | None, workers: int = 1) -> None:
    """Serve the API and the page on ``host:port`` until interrupted, in ``workers`` processes."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise WattGPUError(f"wattgpu serve needs the serve extra ({exc.name} is not installed): "
                           "pip install \"wattgpu[serve]\"") from None
    from .asgi import create_app

    app = create_app(models)
    app.state.service.predictor()  # load and check the bundle now: a bad --models fails before listening
    sock = bind(host, port)
    if workers == 1:
        _run(sock, app)
    else:
        del app  # each worker loads its own
        _supervise(sock, models, workers)
