"""Turn what a user passes (catalog names, file paths, spec objects, mappings) into resolved rows.

Argument order: every function and every row tuple in WattGPU takes ``(gpu, llm, workload)`` — the
hardware, what runs on it, how it is loaded. Calls written for the 0.1 order ``(llm, gpu, …)`` are
recognised when unambiguous (spec types, or catalog names that only match the other way round),
still work, and raise a DeprecationWarning.
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Mapping

from .errors import WattGPUError
from .specs import Catalog, GpuSpec, LlmSpec
from .workload import Workload

LEGACY_ORDER_WARNING = ("pass (gpu, llm, workload): the (llm, gpu, …) order of wattgpu 0.1 is deprecated "
                        "and will be removed")


def resolve_gpu(catalog: Catalog, gpu: Any) -> GpuSpec:
    """A GpuSpec from a spec, a catalog name/alias, or a path to a JSON file of spec-sheet numbers.

    Catalog names win over same-named files; pass ``./name`` or a Path to force a file."""
    if isinstance(gpu, GpuSpec):
        return gpu
    if isinstance(gpu, str):  # catalog names first: a dict lookup, no filesystem calls
        hit = catalog.find_gpu(gpu)
        if hit is not None:
            return hit
    if isinstance(gpu, os.PathLike) or (isinstance(gpu, str) and looks_like_path(gpu)):
        from .safeio import read_json_file

        data = read_json_file(gpu, what="GPU spec", dir_file=None)
        return GpuSpec.from_dict(data, entity=f"GPU file {os.fspath(gpu)!r}")
    if not isinstance(gpu, str):
        raise WattGPUError(f"gpu: expected a catalog name, a JSON file path or a GpuSpec, got {type(gpu).__name__}")
    return catalog.gpu(gpu)


def resolve_llm(catalog: Catalog, llm: Any) -> LlmSpec:
    """An LlmSpec from a spec, a catalog id, a config.json path or a model directory holding one."""
    if isinstance(llm, LlmSpec):
        return llm
    if isinstance(llm, str):
        hit = catalog.find_llm(llm)
        if hit is not None:
            return hit
    if isinstance(llm, os.PathLike) or (isinstance(llm, str) and looks_like_path(llm)):
        from .hfconfig import load_llm_file

        return load_llm_file(llm)
    if not isinstance(llm, str):
        raise WattGPUError(f"llm: expected a catalog id, a config.json path or an LlmSpec, got {type(llm).__name__}")
    return catalog.llm(llm)


def is_legacy_order(catalog: Catalog, first: Any, second: Any) -> bool:
    """True when ``(first, second)`` is clearly ``(llm, gpu)`` rather than ``(gpu, llm)``."""
    if isinstance(first, LlmSpec) or isinstance(second, GpuSpec):
        return True
    if isinstance(first, GpuSpec) or isinstance(second, LlmSpec):
        return False
    first_gpu = isinstance(first, str) and catalog.find_gpu(first) is not None
    if first_gpu:
        return False
    return (isinstance(first, str) and catalog.find_llm(first) is not None) or \
        (isinstance(second, str) and catalog.find_gpu(second) is not None
         and catalog.find_llm(second) is None)


def resolve_pair(catalog: Catalog, gpu: Any, llm: Any, stacklevel: int = 3) -> tuple[GpuSpec, LlmSpec]:
    """Resolve a (gpu, llm) pair, accepting the deprecated (llm, gpu) order with a warning."""
    known = catalog.known_pair(gpu, llm)
    if known is not None:  # a GPU name first is never the legacy order
        return known
    if is_legacy_order(catalog, gpu, llm):
        warnings.warn(LEGACY_ORDER_WARNING, DeprecationWarning, stacklevel=stacklevel)
        gpu, llm = llm, gpu
    return resolve_gpu(catalog, gpu), resolve_llm(catalog, llm)


_DEFAULT_WORKLOAD = Workload()


def as_workload(w: Any) -> Workload:
    """A Workload from a Workload, a mapping of its fields, or None (the defaults)."""
    if w is None:
        return _DEFAULT_WORKLOAD  # frozen: one shared instance
    if isinstance(w, Mapping):
        return Workload.from_dict(w)
    if not isinstance(w, Workload):
        raise WattGPUError(f"workload: expected a Workload, a mapping of its fields or None, got {type(w).__name__}")
    return w


def looks_like_path(text: str) -> bool:
    """True for what can only be a file or directory: an existing path, or text written as one
    (``./x``, ``../x``, ``~/x``, ``/x``, ``x/``, ``x.json``) — which then must exist, so a typo'd path is
    reported as a missing file, not as an unknown catalog name. ``org/name`` ids are not paths unless
    they exist on disk."""
    return text.endswith((".json", "/", os.sep)) or text.startswith((".", "~", "/", os.sep)) \
        or (os.sep in text and os.path.lexists(text)) or os.path.isdir(text)
