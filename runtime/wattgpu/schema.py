"""Backwards-compatible names for the bundle manifest; the format itself lives in :mod:`wattgpu.bundle`."""
from __future__ import annotations

from .bundle import FORMAT_VERSION, SCHEMA_FILE, FeatureInfo, FeatureSchema, ModelSchema

SCHEMA_VERSION = FORMAT_VERSION

__all__ = ["SCHEMA_VERSION", "SCHEMA_FILE", "FeatureInfo", "FeatureSchema", "ModelSchema"]
