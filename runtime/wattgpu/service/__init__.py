"""WattGPU over HTTP: a JSON API with OpenAPI and a GPU-picker page (``pip install "wattgpu[serve]"``).

``wattgpu.service:app`` is the ASGI app for any ASGI server or serverless adapter; ``wattgpu serve``
runs it under uvicorn. Starlette is imported only when ``app`` or ``create_app`` is first used, so the
core runtime never needs the extra (see :mod:`wattgpu.service.asgi`).
"""
from __future__ import annotations

from typing import Any

__all__ = ["app", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.asgi"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
