"""``wattgpu serve``: run the app under uvicorn, with a one-line error when the extra is missing."""
from __future__ import annotations

from ..errors import WattGPUError


def serve(host: str, port: int, models: str | None) -> None:
    """Serve the API and the page on ``host:port`` until interrupted."""
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise WattGPUError(f"wattgpu serve needs the serve extra ({exc.name} is not installed): "
                           "pip install \"wattgpu[serve]\"") from None
    from .asgi import create_app

    app = create_app(models)
    app.state.service.predictor()  # load and check the bundle now: a bad --models fails before listening
    uvicorn.run(app, host=host, port=port, log_level="info", access_log=False, timeout_keep_alive=5)
