"""``wattgpu serve``: run the app under uvicorn, with a one-line error when the extra is missing or the
address cannot be bound."""
from __future__ import annotations

import socket

from ..errors import WattGPUError

LIMIT_CONCURRENCY = 2048  # open connections + tasks uvicorn accepts before answering 503 itself


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or a one-line error naming the option to change."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
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


def serve(host: str, port: int, models: str | None) -> None:
    """Serve the API and the page on ``host:port`` until interrupted."""
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise WattGPUError(f"wattgpu serve needs the serve extra ({exc.name} is not installed): "
                           "pip install \"wattgpu[serve]\"") from None
    from .asgi import create_app
    from .protocol import protocol_class

    app = create_app(models)
    app.state.service.predictor()  # load and check the bundle now: a bad --models fails before listening
    sock = bind(host, port)
    config = uvicorn.Config(app, host=host, port=port, log_level="info", access_log=False, timeout_keep_alive=5,
                            http=protocol_class(), limit_concurrency=LIMIT_CONCURRENCY)
    uvicorn.Server(config).run(sockets=[sock])
