"""The feature schema shipped beside the ONNX models: strict, versioned, frozen."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import ArtifactError
from .features import REGISTRY
from .targets import TRANSFORMS

SCHEMA_VERSION = 1
SCHEMA_FILE = "feature_schema.json"


@dataclass(frozen=True)
class FeatureInfo:
    name: str
    unit: str
    description: str


@dataclass(frozen=True)
class ModelSchema:
    """One exported model: its ONNX file, ordered input features, target transform and hash."""

    target: str  # "power" | "itl"
    file: str
    sha256: str
    features: tuple[FeatureInfo, ...]
    transform: str
    unit: str
    input_name: str = "input"

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.features)


@dataclass(frozen=True)
class FeatureSchema:
    schema_version: int
    recipe: str
    models: Mapping[str, ModelSchema]
    catalog_file: str
    catalog_sha256: str
    training: Mapping[str, Any]
    producer: Mapping[str, Any]
    intervals: Mapping[str, Any]
    domain: Mapping[str, Any]

    @classmethod
    def from_json(cls, raw: bytes, origin: str = SCHEMA_FILE) -> "FeatureSchema":
        """Parse and check a schema; any problem raises ArtifactError naming the file and the fix."""
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise ArtifactError(f"{origin}: not valid JSON ({exc}); re-export the models or reinstall wattgpu") from None
        if not isinstance(data, dict):
            raise ArtifactError(f"{origin}: expected a JSON object")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ArtifactError(f"{origin}: schema_version {version!r} is not supported by this runtime "
                                f"(expects {SCHEMA_VERSION}); install the wattgpu version that exported it")
        try:
            models = {}
            for target, m in data["models"].items():
                feats = tuple(FeatureInfo(f["name"], f["unit"], f.get("description", "")) for f in m["features"])
                unknown = [f.name for f in feats if f.name not in REGISTRY]
                if unknown:
                    raise ArtifactError(f"{origin}: model {target!r} needs features this runtime lacks: {unknown}")
                if m["transform"] not in TRANSFORMS:
                    raise ArtifactError(f"{origin}: model {target!r} uses unknown target transform {m['transform']!r}")
                models[target] = ModelSchema(target=target, file=m["file"], sha256=m["sha256"], features=feats,
                                             transform=m["transform"], unit=m["unit"],
                                             input_name=m.get("input_name", "input"))
            for f in [m.file for m in models.values()] + [data["catalog"]["file"]]:
                if not isinstance(f, str) or not f or "/" in f or "\\" in f or f in (".", ".."):
                    raise ArtifactError(f"{origin}: artifact file name {f!r} must be a plain file name in the "
                                        "models directory; re-export the models")
            return cls(schema_version=version, recipe=data["recipe"], models=models,
                       catalog_file=data["catalog"]["file"], catalog_sha256=data["catalog"]["sha256"],
                       training=data.get("training", {}), producer=data.get("producer", {}),
                       intervals=data.get("intervals", {}), domain=data.get("domain", {}))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ArtifactError(f"{origin}: missing or malformed entry {exc!s}; re-export the models") from None
