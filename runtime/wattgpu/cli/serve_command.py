"""``wattgpu serve``: the JSON API and the page over HTTP (the [serve] extra)."""
from __future__ import annotations

import click

from .base import guarded, main
from .options import models_option


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 exposes it to the network: put it behind a proxy).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="TCP port to listen on.")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Server processes sharing the port (one per CPU core; each loads its own models, ~90 MB).")
@models_option
@guarded
def serve(host: str, port: int, models: str | None, workers: int) -> None:
    """Serve the JSON API and the GPU-picker page over HTTP (needs the extra: pip install "wattgpu[serve]")."""
    from ..service.run import serve as run_server

    run_server(host, port, models, workers)
