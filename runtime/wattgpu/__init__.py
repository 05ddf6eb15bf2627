"""WattGPU: predict LLM inference power and inter-token latency on NVIDIA GPUs from public metadata."""
from __future__ import annotations

__version__ = "0.1.0"
