"""The model bundle: a directory of exported artifacts (schema, ONNX models, catalog), verified on read.

A :class:`ModelBundle` reads from the packaged ``wattgpu/models`` or an explicit directory, checks
every file against the sha256 recorded in ``feature_schema.json`` before first use, and creates the
onnxruntime sessions lazily (CPU provider, one intra-op thread for bit-identical results across
machines). Thread-safe.
"""
from __future__ import annotations

import json
import os
import threading
from typing import TYPE_CHECKING, Any

from .errors import ArtifactError
from .schema import SCHEMA_FILE, FeatureSchema, ModelSchema
from .specs import Catalog, default_catalog, packaged_bytes

if TYPE_CHECKING:
    from pathlib import Path

PACKAGED = "wattgpu/models"
IntervalFactors = dict[str, tuple[tuple[float, float, float], ...]]


def sha256(data: bytes) -> str:
    try:  # the builtin module: no OpenSSL load on the cold-start path
        from _sha256 import sha256 as digest  # type: ignore[import-not-found]
    except ImportError:  # Python 3.12+ (_sha2) or a build without it
        from hashlib import sha256 as digest
    return digest(data).hexdigest()


class ModelBundle:
    """One exported model set: its schema, catalog and (lazily) onnxruntime sessions."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        if path is not None:
            from pathlib import Path  # only for explicit bundles: keeps pathlib off the cold start

            self.path: Path | None = Path(path)
        else:
            self.path = None
        self._schema: FeatureSchema | None = None
        self._catalog: Catalog | None = None
        self._factors: IntervalFactors | None = None
        self._sessions: dict[str, Any] = {}
        self._lock = threading.RLock()  # session() reads .schema while holding it

    # ---- files
    def label(self, name: str) -> str:
        """How messages name a file of this bundle."""
        return f"{self.path or PACKAGED}/{name}"

    def read(self, name: str) -> bytes:
        """The bytes of one artifact file (ArtifactError naming it when it cannot be read)."""
        try:
            if self.path is None:
                return packaged_bytes(name)
            return (self.path / name).read_bytes()
        except (FileNotFoundError, IsADirectoryError, OSError) as exc:
            raise ArtifactError(f"{self.label(name)}: cannot read model artifact ({exc.__class__.__name__}); "
                                "reinstall wattgpu or re-export the models") from None

    def read_verified(self, name: str, expected_sha256: str, what: str) -> bytes:
        """The bytes of ``name`` after checking them against the schema's hash."""
        data = self.read(name)
        if sha256(data) != expected_sha256:
            raise ArtifactError(f"{self.label(name)}: sha256 does not match {SCHEMA_FILE}; {what}")
        return data

    # ---- sections
    @property
    def schema(self) -> FeatureSchema:
        """The parsed schema (the catalog's hash is verified with it)."""
        if self._schema is None:
            with self._lock:
                if self._schema is None:
                    schema = FeatureSchema.from_json(self.read(SCHEMA_FILE), self.label(SCHEMA_FILE))
                    self.read_verified(schema.catalog_file, schema.catalog_sha256,
                                       "the catalog was modified — reinstall or re-export")
                    self._schema = schema
        return self._schema

    @property
    def catalog(self) -> Catalog:
        """The GPU/LLM catalog the models were exported with (hash-verified)."""
        if self._catalog is None:
            if self.path is None:
                self.schema  # verifies the packaged catalog's hash
                self._catalog = default_catalog()
            else:
                raw = self.read(self.schema.catalog_file)
                try:
                    data = json.loads(raw)
                except ValueError as exc:
                    raise ArtifactError(f"{self.label(self.schema.catalog_file)}: not valid JSON ({exc}); "
                                        "reinstall or re-export") from None
                self._catalog = Catalog.from_json(data)
        return self._catalog

    @property
    def interval_factors(self) -> IntervalFactors:
        """target -> ((level, low factor, high factor), ...), parsed once."""
        if self._factors is None:
            self._factors = parse_interval_factors(self.schema.intervals)
        return self._factors

    # ---- onnxruntime
    def session(self, target: str) -> Any:
        """The onnxruntime session of ``target`` ("power" or "itl"), created on first use."""
        sess = self._sessions.get(target)
        if sess is None:
            with self._lock:
                sess = self._sessions.get(target)
                if sess is None:
                    sess = self._sessions[target] = self._load_session(self.schema.models[target])
        return sess

    def _load_session(self, m: ModelSchema) -> Any:
        import onnxruntime as ort

        data = self.read_verified(m.file, m.sha256, "(tampered, truncated or from another export); reinstall or re-export")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        try:
            sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ArtifactError(f"{self.label(m.file)}: onnxruntime cannot load it ({exc.__class__.__name__})") from None
        meta = sess.get_modelmeta().custom_metadata_map
        if meta.get("wattgpu.features") != ",".join(m.feature_names):
            raise ArtifactError(f"{self.label(m.file)}: its feature list differs from {SCHEMA_FILE}; re-export")
        return sess


def parse_interval_factors(intervals: Any) -> IntervalFactors:
    """Parse the schema's calibrated factors once: target -> ((level, low factor, high factor), ...)."""
    return {target: tuple(sorted((int(level) / 100.0, float(lo), float(hi))
                                 for level, (lo, hi) in spec.get("factors", {}).items()))
            for target, spec in intervals.items() if spec}
