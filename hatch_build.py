"""Wheel build hook: ship the model bundle's large artifacts xz-compressed (issue 37: wheel <= 400 KB).

The zip's per-file deflate leaves ~20 KB on the table for the two ONNX tree ensembles and the catalog
snapshot; xz (stdlib ``lzma``) shrinks them further. The source tree and editable installs keep the plain
files; ``wattgpu.specs.packaged_bytes`` reads ``<name>.xz`` when the plain file is absent, and the bundle's
sha256 checks run on the decompressed bytes, so the manifest is the same either way.
"""
from __future__ import annotations

import lzma
import os
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MODELS = os.path.join("runtime", "wattgpu", "models")
COMPRESSED = ("itl.onnx", "power.onnx", "specs.json")


class CompressArtifacts(BuildHookInterface):  # type: ignore[type-arg]
    """Replace the large bundle files with ``.xz`` copies in standard (non-editable) wheels."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        out_dir = os.path.join(self.directory, ".xz-artifacts")
        os.makedirs(out_dir, exist_ok=True)
        for name in COMPRESSED:
            src = os.path.join(self.root, MODELS, name)
            with open(src, "rb") as f:
                packed = lzma.compress(f.read(), preset=9 | lzma.PRESET_EXTREME)
            dest = os.path.join(out_dir, name + ".xz")
            with open(dest, "wb") as f:
                f.write(packed)
            build_data["force_include"][dest] = f"wattgpu/models/{name}.xz"
