"""The model bundle: WattGPU's one artifact format, its writer beside its reader.

Export builds the manifest with :func:`new_manifest` and :func:`model_entry` and writes it with
:func:`write_bundle`; ``wattgpu calibrate`` and ``wattgpu-train sync-catalog`` replace a section or the
catalog with :func:`rewrite_bundle` (same ONNX files, no refit); the runtime reads it with
:class:`ModelBundle`. Only JSON and hashes live here: the ONNX bytes come from export.

A bundle is a directory holding ``feature_schema.json`` (the manifest), one ONNX file per target and
the catalog snapshot (``specs.json``). The manifest records every file's sha256; each ONNX file
carries ``wattgpu.*`` metadata that must agree with the manifest.

Format version and its bump rule
--------------------------------
``FORMAT_VERSION`` (stored as the manifest's ``schema_version``) is bumped whenever a reader of the
previous version would misread or refuse a new bundle: a key added, removed or renamed in any
section, a value whose meaning or unit changes, a new file in the layout. Changing numbers (a
retrain, new training rows, another catalog) is *not* a format change. On a bump, either keep a
reader for the old version in ``READERS`` (and keep its frozen fixture loading in the tests), or
drop it, in which case such bundles are refused with "made by format version N".

Reading is strict: every section's keys are checked, and a missing or unknown key is an
:class:`ArtifactError` naming it (so a renamed key cannot silently switch off, say, the
out-of-range warnings). Free-form maps (hyperparameters, per-source row counts) are marked as such.
"""
from __future__ import annotations

import json
import operator
import os
import threading
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .frozen import dataclass
from .calibration_format import read_section
from .ttft_fit import NO_FIT, TtftFit
from .ttft_fit import read_section as read_ttft_section
from .errors import ArtifactError, ConfigFileError
from .features import REGISTRY
from .safeio import parse_json_bytes, read_bounded
from .specs import CATALOG_RESOURCE, Catalog, default_catalog, packaged_bytes
from .targets import TARGETS, TRANSFORMS, UNITS
from .rules import is_finite_number

if TYPE_CHECKING:
    from pathlib import Path

FORMAT_VERSION = 5  # 2: the ``calibration`` section; 3: that section in physical terms, per measured GPU (issue 33);
# 4: + each measured LLM's own share and the TTFT scale in that section (issue 39); 5: + the ``ttft`` section
# (the fitted TTFT excess and its interval: wattgpu.ttft_fit, issue 38)
SCHEMA_FILE = "feature_schema.json"  # the manifest
PACKAGED = "wattgpu/models"
META_PREFIX = "wattgpu."
MAX_ARTIFACT_BYTES = 512 * 1024**2  # one bundle file (the packaged ONNX models are < 1 MB each)
MAX_JSON_DEPTH = 64  # manifest and catalog nest at most a handful of levels
REFIX = "re-export the models or reinstall wattgpu"

# ---- the manifest, section by section: key -> (required?, check). Check raises on a bad value.
MANIFEST_KEYS_V1 = ("schema_version", "recipe", "models", "catalog", "training", "intervals", "domain", "producer")
MANIFEST_KEYS = (*MANIFEST_KEYS_V1, "calibration")
MANIFEST_KEYS_V5 = (*MANIFEST_KEYS, "ttft")
# The ONNX files' stamped format version each manifest version accepts: format 2 changed only the
# manifest, so a calibrated (format-2) bundle carries the unchanged model files of a format-1 export.
ONNX_FORMATS = {1: ("1",), 2: ("1", "2"), 3: ("1", "2", "3"), 4: ("1", "2", "3", "4"), 5: ("1", "2", "3", "4", "5")}
MODEL_KEYS = ("file", "sha256", "transform", "unit", "input_name", "features", "xgboost_params",
              "parity_max_rel_diff", "parity_rtol")
FEATURE_KEYS = ("name", "unit", "description")
CATALOG_KEYS = ("file", "sha256")
TRAINING_KEYS = ("measured_only", "targets", "data_dir", "watt_counts")
TRAINING_TARGET_KEYS = ("rows", "gpus", "llms", "sources", "records_sha256")
INTERVAL_KEYS = ("factors", "method", "n_residuals")
DOMAIN_KEYS = ("gpu_ranges", "llm_params_b", "arch_classes", "moe_seen", "quantized_seen", "kinds", "engines", "gpus")
DOMAIN_OPTIONAL = ("tp_range",)  # tensor-parallel degrees in training; absent in bundles from before TP (= [1, 1])
DOMAIN_GPU_FIELDS = ("tdp_w", "memory_size_gb", "memory_bandwidth_gb_s", "fp16_tflops", "release_year")
PRODUCER_KEYS = ("python", "xgboost", "onnx", "onnxmltools", "onnxruntime", "numpy")

MAX_INTERVAL_FACTOR = 1e3  # an interval's high end at most 1000× the point prediction
IntervalFactors = dict[str, tuple[tuple[float, float, float], ...]]


def sha256(data: bytes) -> str:
    return _digest()(data).hexdigest()


def _digest() -> Callable[[bytes], Any]:
    """sha256 from CPython's builtin module when it has one (``_sha256`` up to 3.11, ``_sha2`` from 3.12): importing
    hashlib loads OpenSSL, 4-10 ms of a cold start; hashlib where neither exists (another interpreter)."""
    for module in ("_sha256", "_sha2"):
        try:
            return __import__(module).sha256
        except (ImportError, AttributeError):
            continue
    from hashlib import sha256

    return sha256


@dataclass(frozen=True)
class FeatureInfo:
    """One model input as the manifest describes it: its name, unit and meaning."""

    name: str
    unit: str
    description: str


@dataclass(frozen=True)
class ModelSchema:
    """One exported model: its ONNX file, ordered input features, target transform and hash."""

    target: str  # one of targets.TARGETS
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
    """The parsed manifest of a bundle."""

    schema_version: int
    recipe: str
    models: Mapping[str, ModelSchema]
    catalog_file: str
    catalog_sha256: str
    training: Mapping[str, Any]
    producer: Mapping[str, Any]
    intervals: Mapping[str, Any]
    domain: Mapping[str, Any]
    calibration: Mapping[str, Any] | None = None  # format 2: see wattgpu.calibration
    ttft: TtftFit = NO_FIT  # format 5: see wattgpu.ttft_fit

    @property
    def format_version(self) -> int:
        return self.schema_version

    @classmethod
    def from_json(cls, raw: bytes, origin: str = SCHEMA_FILE) -> "FeatureSchema":
        """Parse and check a manifest; any problem raises ArtifactError naming the file, key and fix."""
        return read_manifest(raw, origin)


# ---- strict reading
class _Reader:
    """Checks one manifest, naming the file and the key path of the first problem."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, where: str, problem: str) -> ArtifactError:
        return ArtifactError(f"{self.origin}: {where} {problem}; re-export the models or reinstall wattgpu")

    def keys(self, obj: Any, where: str, allowed: tuple[str, ...], optional: tuple[str, ...] = ()) -> Mapping[str, Any]:
        if not isinstance(obj, dict):
            raise self.fail(where, f"must be a JSON object, not {type(obj).__name__}")
        unknown = [k for k in obj if k not in allowed]
        if unknown:
            raise self.fail(where, f"has unknown key {unknown[0]!r} (expected {', '.join(allowed)})")
        missing = [k for k in allowed if k not in obj and k not in optional]
        if missing:
            raise self.fail(where, f"is missing key {missing[0]!r}")
        return obj

    def value(self, obj: Mapping[str, Any], key: str, where: str, ok: Callable[[Any], bool], expected: str) -> Any:
        v = obj[key]
        if not ok(v):
            raise self.fail(f"{where}.{key}", f"= {_short(v)} is invalid; expected {expected}")
        return v

    def text(self, obj: Mapping[str, Any], key: str, where: str) -> str:
        return str(self.value(obj, key, where, lambda v: isinstance(v, str), "a string"))

    def file_name(self, obj: Mapping[str, Any], key: str, where: str) -> str:
        return str(self.value(obj, key, where, _plain_file_name, "a plain file name in the bundle directory"))

    def digest(self, obj: Mapping[str, Any], key: str, where: str) -> str:
        return str(self.value(obj, key, where, _is_sha256, "a sha256 hex digest"))

    def map_of(self, obj: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(obj, dict):
            raise self.fail(where, f"must be a JSON object, not {type(obj).__name__}")
        return obj


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _plain_file_name(f: Any) -> bool:
    return isinstance(f, str) and bool(f) and "/" not in f and "\\" not in f and f not in (".", "..")


def _is_sha256(v: Any) -> bool:
    return isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_range(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(is_finite_number(x) for x in v) and v[0] <= v[1]


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def read_manifest(raw: bytes, origin: str = SCHEMA_FILE) -> FeatureSchema:
    """Parse a manifest of any version this runtime reads; other versions are refused by name."""
    data = _parse_json(raw, origin, "model manifest")
    if not isinstance(data, dict):
        raise ArtifactError(f"{origin}: expected a JSON object; {REFIX}")
    version = data.get("schema_version")
    if "schema_version" in data and (isinstance(version, bool) or not isinstance(version, int)):
        raise ArtifactError(f"{origin}: schema_version = {_short(version)} is a JSON {_json_type(version)}, "
                            f"not an integer (the format version, e.g. {FORMAT_VERSION}); {REFIX}")
    reader = READERS.get(version) if isinstance(version, int) and not isinstance(version, bool) else None
    if reader is None:
        made = f"made by format version {version}" if "schema_version" in data else "has no schema_version"
        raise ArtifactError(f"{origin}: {made}; this runtime reads format version(s) "
                            f"{', '.join(map(str, sorted(READERS)))} — use the wattgpu version that made it, "
                            "or re-export the models with this one")
    return reader(data, _Reader(origin))


def _json_type(v: Any) -> str:
    return ("boolean" if isinstance(v, bool) else "string" if isinstance(v, str) else "null" if v is None
            else "array" if isinstance(v, list) else "object" if isinstance(v, dict) else "number")


def _parse_json(raw: bytes, origin: str, what: str) -> Any:
    """Strict, bounded JSON of a bundle file (depth, encodings, non-finite numbers) as ArtifactError."""
    try:
        return parse_json_bytes(raw, origin, what, max_depth=MAX_JSON_DEPTH)
    except ConfigFileError as exc:
        raise ArtifactError(f"{origin}: {exc.problem.split('; ')[0]}; {REFIX}") from None


def _read_v1(data: Mapping[str, Any], r: _Reader, keys: tuple[str, ...] = MANIFEST_KEYS_V1) -> FeatureSchema:
    r.keys(data, "manifest", keys)
    recipe = r.text(data, "recipe", "manifest")
    models: dict[str, ModelSchema] = {}
    for target, m in r.map_of(data["models"], "models").items():
        where = f"models.{target}"
        if target not in TARGETS:
            raise r.fail("models", f"has unknown target {target!r} (expected one of {', '.join(TARGETS)})")
        r.keys(m, where, MODEL_KEYS)
        feats_raw = r.value(m, "features", where, lambda v: isinstance(v, list) and bool(v), "a non-empty list")
        feats = []
        for j, f in enumerate(feats_raw):
            fw = f"{where}.features[{j}]"
            r.keys(f, fw, FEATURE_KEYS)
            name = r.text(f, "name", fw)
            if name not in REGISTRY:
                raise r.fail(fw, f"names feature {name!r}, which this runtime lacks")
            feats.append(FeatureInfo(name, r.text(f, "unit", fw), r.text(f, "description", fw)))
        transform = r.text(m, "transform", where)
        if transform not in TRANSFORMS:
            raise r.fail(f"{where}.transform", f"= {transform!r} is an unknown target transform")
        r.value(m, "xgboost_params", where, lambda v: isinstance(v, dict), "a JSON object (free-form)")
        for k in ("parity_max_rel_diff", "parity_rtol"):
            r.value(m, k, where, lambda v: is_finite_number(v) and v >= 0, "a finite number ≥ 0")
        models[target] = ModelSchema(target=target, file=r.file_name(m, "file", where), sha256=r.digest(m, "sha256", where),
                                     features=tuple(feats), transform=transform,
                                     unit=r.value(m, "unit", where, partial(operator.eq, UNITS[target]), UNITS[target]),
                                     input_name=r.text(m, "input_name", where))
    missing = [t for t in TARGETS if t not in models]
    if missing:
        raise r.fail("models", f"is missing key {missing[0]!r} (a bundle holds one model per target)")
    cat = r.keys(data["catalog"], "catalog", CATALOG_KEYS)
    return FeatureSchema(schema_version=int(data["schema_version"]), recipe=recipe, models=models,
                         catalog_file=r.file_name(cat, "file", "catalog"), catalog_sha256=r.digest(cat, "sha256", "catalog"),
                         training=_training(data["training"], r, models), producer=_producer(data["producer"], r),
                         intervals=_intervals(data["intervals"], r, models), domain=_domain(data["domain"], r))


def _training(t: Any, r: _Reader, models: Mapping[str, ModelSchema]) -> Mapping[str, Any]:
    r.keys(t, "training", TRAINING_KEYS)
    r.keys(t["targets"], "training.targets", tuple(models))
    r.value(t, "measured_only", "training", lambda v: isinstance(v, bool), "true or false")
    r.value(t, "data_dir", "training", lambda v: v is None or isinstance(v, str), "a string or null")
    r.value(t, "watt_counts", "training", lambda v: v is None or isinstance(v, str), "a string or null")
    for target, s in r.map_of(t["targets"], "training.targets").items():
        where = f"training.targets.{target}"
        r.keys(s, where, TRAINING_TARGET_KEYS)
        r.value(s, "rows", where, _is_count, "a row count")
        r.value(s, "llms", where, _is_count, "an LLM count")
        r.value(s, "gpus", where, _is_str_list, "a list of GPU names")
        r.value(s, "sources", where, lambda v: isinstance(v, dict), "a JSON object (free-form: source -> rows)")
        r.digest(s, "records_sha256", where)
    return t


def _producer(p: Any, r: _Reader) -> Mapping[str, Any]:
    r.keys(p, "producer", PRODUCER_KEYS)
    for k in PRODUCER_KEYS:
        r.text(p, k, "producer")
    return p


def _intervals(iv: Any, r: _Reader, models: Mapping[str, ModelSchema]) -> Mapping[str, Any]:
    for target, spec in r.map_of(iv, "intervals").items():
        where = f"intervals.{target}"
        if target not in models:
            raise r.fail("intervals", f"has key {target!r}, which is not a model of this bundle")
        r.keys(spec, where, INTERVAL_KEYS)
        r.text(spec, "method", where)
        r.value(spec, "n_residuals", where, _is_count, "a count")
        for level, pair in r.map_of(spec["factors"], f"{where}.factors").items():
            if not (level.isdigit() and 0 < int(level) < 100):
                raise r.fail(f"{where}.factors", f"has key {level!r}; expected a coverage level in percent")
            # a biased model may calibrate an interval that misses its point (low > 1): allowed, but never
            # an empty, non-positive, infinite or absurd one
            if not (_is_range(pair) and 0 < pair[0] and pair[1] <= MAX_INTERVAL_FACTOR):
                raise r.fail(f"{where}.factors.{level}", f"= {_short(pair)} is invalid; expected finite [low, high] "
                                                         f"factors with 0 < low ≤ high ≤ {MAX_INTERVAL_FACTOR:g}")
    return iv


def _domain(d: Any, r: _Reader) -> Mapping[str, Any]:
    r.keys(d, "domain", DOMAIN_KEYS + DOMAIN_OPTIONAL, optional=DOMAIN_OPTIONAL)
    if "tp_range" in d:
        r.value(d, "tp_range", "domain", lambda v: _is_range(v) and v[0] >= 1, "[low, high] tensor-parallel degrees ≥ 1")
    for field_name, rng in r.map_of(d["gpu_ranges"], "domain.gpu_ranges").items():
        if field_name not in DOMAIN_GPU_FIELDS:
            raise r.fail("domain.gpu_ranges", f"has unknown key {field_name!r} (expected {', '.join(DOMAIN_GPU_FIELDS)})")
        if not (_is_range(rng) and rng[0] >= 0):
            raise r.fail(f"domain.gpu_ranges.{field_name}", f"= {_short(rng)} is invalid; expected finite [low, high] ≥ 0")
    r.value(d, "llm_params_b", "domain", lambda v: _is_range(v) and v[0] >= 0, "finite [low, high] billions of parameters")
    for k in ("arch_classes", "kinds", "engines", "gpus"):
        r.value(d, k, "domain", _is_str_list, "a list of names")
    for k in ("moe_seen", "quantized_seen"):
        r.value(d, k, "domain", lambda v: isinstance(v, bool), "true or false")
    return d


def _read_v2(data: Mapping[str, Any], r: _Reader) -> FeatureSchema:
    """Format 2 = format 1 + ``calibration``; a format-2 calibration (one factor per GPU and a stack
    factor) is refused: calibrate again (format 3)."""
    if data.get("calibration") is not None:
        raise r.fail("calibration", "was made by an earlier `wattgpu calibrate` (format 2: one factor per GPU); "
                                    "calibrate again from the base bundle with the same runs")
    return _read_v3(data, r)


def _read_v3(data: Mapping[str, Any], r: _Reader) -> FeatureSchema:
    """Format 3 = format 1 + ``calibration`` (null, or an issue-33 section: no LLM shares, no TTFT)."""
    return _read_calibrated(data, r, 3)


def _read_v4(data: Mapping[str, Any], r: _Reader) -> FeatureSchema:
    """Format 4 = format 3 whose ``calibration`` section also holds each measured LLM's share and the TTFT scale."""
    return _read_calibrated(data, r, 4)


def _read_v5(data: Mapping[str, Any], r: _Reader) -> FeatureSchema:
    """Format 5 = format 4 + the ``ttft`` section (null, or the fitted TTFT excess and interval: wattgpu.ttft_fit)."""
    from dataclasses import replace

    schema = _read_calibrated(data, r, 4, MANIFEST_KEYS_V5)
    try:
        fit = read_ttft_section(data["ttft"])
    except ValueError as exc:
        raise r.fail("ttft", str(exc)) from None
    return replace(schema, ttft=fit)


def _read_calibrated(data: Mapping[str, Any], r: _Reader, version: int,
                     keys: tuple[str, ...] = MANIFEST_KEYS) -> FeatureSchema:
    from dataclasses import replace

    schema = _read_v1(data, r, keys)
    section = data["calibration"]
    if section is not None:
        try:
            read_section(section, set(schema.models), version)  # wattgpu.calibration_format: the section's rules
        except ValueError as exc:
            raise r.fail("calibration", str(exc)) from None
    return replace(schema, calibration=section)


READERS: dict[int, Callable[[Mapping[str, Any], _Reader], FeatureSchema]] = {1: _read_v1, 2: _read_v2, 3: _read_v3,
                                                                         4: _read_v4, 5: _read_v5}


# ---- writing: the manifest is built here, beside its reader (export adds ONNX bytes, calibrate a section)
def new_manifest(*, recipe: str, catalog_bytes: bytes, training: Mapping[str, Any], producer: Mapping[str, str],
                 intervals: Mapping[str, Any] | None = None, domain: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A manifest of this format with no models yet (:func:`model_entry` makes each); the catalog is
    hashed from ``catalog_bytes``. Sections are described in this module's docstring."""
    return {"schema_version": FORMAT_VERSION, "recipe": recipe, "models": {},
            "catalog": {"file": CATALOG_RESOURCE, "sha256": sha256(catalog_bytes)},
            "training": dict(training), "intervals": dict(intervals or {}), "domain": dict(domain or {}),
            "producer": dict(producer),
            "calibration": None,  # set only by `wattgpu calibrate` (wattgpu.calibration)
            "ttft": None}  # set by `wattgpu-train` once the TTFT excess is fitted (wattgpu.ttft_fit)


def model_entry(target: str, features: Sequence[str], transform: str, params: Mapping[str, Any], parity_rtol: float,
                input_name: str = "input") -> dict[str, Any]:
    """One ``models`` entry: each feature labelled with its registry unit and description. The caller sets
    ``sha256`` and ``parity_max_rel_diff`` once the ONNX bytes exist."""
    return {"file": f"{target}.onnx", "transform": transform, "unit": UNITS[target], "input_name": input_name,
            "features": [{"name": f, "unit": REGISTRY[f].unit, "description": REGISTRY[f].description} for f in features],
            "xgboost_params": dict(params), "parity_rtol": parity_rtol}


def onnx_metadata(schema: Mapping[str, Any], target: str) -> dict[str, str]:
    """The ``wattgpu.*`` metadata export stamps into ``target``'s ONNX file, from its manifest dict."""
    m = schema["models"][target]
    return {META_PREFIX + "schema_version": str(schema["schema_version"]), META_PREFIX + "target": target,
            META_PREFIX + "recipe": schema["recipe"], META_PREFIX + "transform": m["transform"],
            META_PREFIX + "features": ",".join(f["name"] for f in m["features"]),
            META_PREFIX + "catalog_sha256": schema["catalog"]["sha256"],
            META_PREFIX + "producer": json.dumps(schema["producer"], sort_keys=True),
            META_PREFIX + "training": json.dumps(schema["training"].get("targets", {}).get(target, {}), sort_keys=True)}


def check_onnx_metadata(meta: Mapping[str, str], schema: FeatureSchema, m: ModelSchema, label: str) -> None:
    """The ONNX file's stamped metadata must agree with the manifest entry that names it.

    The catalog hash is stamped for provenance only: the catalog may be updated (and re-hashed in the
    manifest) without retraining."""
    stamped = meta.get(META_PREFIX + "schema_version")
    if stamped is not None and stamped in ONNX_FORMATS.get(schema.schema_version, ()):
        stamped_ok = stamped  # a model file of an earlier format this manifest version carries unchanged
    else:
        stamped_ok = str(schema.schema_version)
    want = {"schema_version": stamped_ok, "target": m.target, "recipe": schema.recipe,
            "transform": m.transform, "features": ",".join(m.feature_names)}
    for key, value in want.items():
        got = meta.get(META_PREFIX + key)
        if got is None:
            raise ArtifactError(f"{label}: ONNX metadata lacks {META_PREFIX}{key}; re-export")
        if got != value:
            what = "its feature list differs from" if key == "features" else f"its {META_PREFIX}{key} {got!r} differs from"
            raise ArtifactError(f"{label}: {what} {SCHEMA_FILE} ({value!r:.60}); re-export")


def write_bundle(out_dir: Path, schema: Mapping[str, Any], blobs: Mapping[str, bytes], catalog_bytes: bytes) -> None:
    """Write a complete bundle after checking that this runtime reads its manifest back.

    ``blobs`` maps ONNX file name → bytes; their hashes and the catalog's must already be in ``schema``."""
    manifest = (json.dumps(schema, indent=1, sort_keys=True) + "\n").encode("utf-8")
    parsed = read_manifest(manifest, f"{out_dir}/{SCHEMA_FILE} (about to be written)")
    for m in parsed.models.values():
        if m.file not in blobs or sha256(blobs[m.file]) != m.sha256:
            raise ArtifactError(f"{out_dir}/{m.file}: bytes do not match the manifest's sha256; nothing written")
    if sha256(catalog_bytes) != parsed.catalog_sha256:
        raise ArtifactError(f"{out_dir}/{parsed.catalog_file}: bytes do not match the manifest's sha256; nothing written")
    out_dir.mkdir(parents=True, exist_ok=True)
    for fname, data in blobs.items():
        (out_dir / fname).write_bytes(data)
    catalog = out_dir / parsed.catalog_file
    if not catalog.is_file() or catalog.read_bytes() != catalog_bytes:  # the source may be this very file
        catalog.write_bytes(catalog_bytes)
    (out_dir / SCHEMA_FILE).write_bytes(manifest)


def rewrite_bundle(base: "ModelBundle", out_dir: Path, catalog_bytes: bytes,
                   sections: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write ``base``'s model files unchanged (hash-checked) with ``catalog_bytes`` as its catalog and the
    manifest's other ``sections`` replaced, as a bundle of this format in ``out_dir`` (``base``'s own
    directory is allowed): a new catalog or calibration without refitting. Returns the manifest written.

    The old catalog need not match its hash: it is the file being replaced."""
    raw = base.read(SCHEMA_FILE)
    schema = read_manifest(raw, base.label(SCHEMA_FILE))
    blobs = {m.file: base.read_verified(m.file, m.sha256, "(tampered, truncated or from another export); re-export")
             for m in schema.models.values()}
    manifest: dict[str, Any] = {"calibration": None, "ttft": None, **json.loads(raw), **dict(sections or {})}
    manifest["schema_version"] = FORMAT_VERSION
    manifest["catalog"] = {**manifest["catalog"], "sha256": sha256(catalog_bytes)}
    write_bundle(out_dir, manifest, blobs, catalog_bytes)
    return manifest


# ---- the reader the runtime uses
class ModelBundle:
    """One bundle on disk (or the packaged one): its manifest, catalog and lazily created sessions.

    Every file is checked against the manifest's sha256 before first use; onnxruntime sessions use
    the CPU provider and one intra-op thread (bit-identical results across machines). Thread-safe."""

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

    def label(self, name: str) -> str:
        """How messages name a file of this bundle."""
        return f"{self.path or PACKAGED}/{name}"

    def read(self, name: str) -> bytes:
        """The bytes of one artifact file (ArtifactError naming it when it cannot be read)."""
        try:
            if self.path is None:
                return packaged_bytes(name)
            # regular files only, bounded: a FIFO would hang, a link to /dev/zero would fill memory
            return read_bounded(self.path / name, what="model bundle file", max_bytes=MAX_ARTIFACT_BYTES)
        except ConfigFileError as exc:
            raise ArtifactError(f"{self.label(name)}: cannot read model artifact: {exc.problem.split('; ')[0]}; "
                                "reinstall wattgpu or re-export the models") from None
        except (FileNotFoundError, IsADirectoryError, OSError) as exc:
            raise ArtifactError(f"{self.label(name)}: cannot read model artifact ({exc.__class__.__name__}); "
                                "reinstall wattgpu or re-export the models") from None

    def read_verified(self, name: str, expected_sha256: str, what: str) -> bytes:
        """The bytes of ``name`` after checking them against the manifest's hash."""
        data = self.read(name)
        if sha256(data) != expected_sha256:
            raise ArtifactError(f"{self.label(name)}: sha256 does not match {SCHEMA_FILE}; {what}")
        return data

    @property
    def schema(self) -> FeatureSchema:
        """The parsed manifest (the catalog's hash is verified with it)."""
        if self._schema is None:
            with self._lock:
                if self._schema is None:
                    schema = read_manifest(self.read(SCHEMA_FILE), self.label(SCHEMA_FILE))
                    self.read_verified(schema.catalog_file, schema.catalog_sha256,
                                       "the catalog was modified — reinstall or re-export")
                    self._schema = schema
        return self._schema

    @property
    def ttft_fit(self) -> TtftFit:
        """The fitted TTFT excess and interval (format 5's ``ttft`` section; none before: wattgpu.ttft_fit)."""
        return self.schema.ttft

    @property
    def catalog(self) -> Catalog:
        """The GPU/LLM catalog the bundle carries (hash-verified)."""
        if self._catalog is None:
            if self.path is None and self.schema.catalog_file == CATALOG_RESOURCE:
                self._catalog = default_catalog()  # the same packaged file, verified by .schema
            else:
                self._catalog = Catalog.from_json(self.catalog_document(), self.label(self.schema.catalog_file))
        return self._catalog

    def catalog_document(self) -> dict[str, Any]:
        """The bundle's catalog as its JSON document (hash-verified), with per-row facts and sources."""
        raw = self.read_verified(self.schema.catalog_file, self.schema.catalog_sha256,
                                 "the catalog was modified — reinstall or re-export")
        data = _parse_json(raw, self.label(self.schema.catalog_file), "catalog")
        if not isinstance(data, dict):
            raise ArtifactError(f"{self.label(self.schema.catalog_file)}: expected a JSON object; reinstall or re-export")
        return data

    def verify(self) -> None:
        """Check every file of the bundle (manifest, catalog, each model's sha256) without loading onnxruntime:
        commands that only read the catalog still refuse a damaged bundle (ArtifactError, exit 3)."""
        for m in self.schema.models.values():
            self.read_verified(m.file, m.sha256, "(tampered, truncated or from another export); reinstall or re-export")

    @property
    def interval_factors(self) -> IntervalFactors:
        """target -> ((level, low factor, high factor), ...), parsed once."""
        if self._factors is None:
            self._factors = parse_interval_factors(self.schema.intervals)
        return self._factors

    def session(self, target: str) -> Any:
        """The onnxruntime session of ``target``, created (and checked) on first use."""
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
        # Neither the CPU memory arena nor memory patterns: the arena grows to the largest demand concurrent
        # runs ever make together and never gives it back (the 16-thread soak's settled RSS stepped up by
        # ~18 MiB late in a run), and a memory pattern is cached per distinct input shape, i.e. per row count
        # a caller sends. Without them each run's few buffers go back to the allocator; a tree ensemble's
        # run time does not notice (one prediction 82-87 us, a 4,096-row table 520-526 ms either way). The
        # price: under 16 threads the transient peak RSS is higher (448-468 vs 391 MiB over the same jobs).
        opts.enable_cpu_mem_arena = False
        opts.enable_mem_pattern = False
        # No graph optimisation passes: an exported model is one TreeEnsembleRegressor node, which no pass
        # rewrites (same outputs bit for bit, tests/test_cold_imports.py), and running them is ~0.3 ms a session
        # of the cold start.
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ArtifactError(f"{self.label(m.file)}: onnxruntime cannot load it ({exc.__class__.__name__})") from None
        check_onnx_metadata(sess.get_modelmeta().custom_metadata_map, self.schema, m, self.label(m.file))
        inputs = [i.name for i in sess.get_inputs()]
        if inputs != [m.input_name]:  # evaluating under another name fails inside onnxruntime
            raise ArtifactError(f"{self.label(m.file)}: its input is {inputs!r:.60}, not the manifest's input_name "
                                f"{m.input_name!r:.60}; re-export")
        return sess


def parse_interval_factors(intervals: Mapping[str, Any]) -> IntervalFactors:
    """The manifest's calibrated factors as target -> ((level, low factor, high factor), ...)."""
    return {target: tuple(sorted((int(level) / 100.0, float(lo), float(hi))
                                 for level, (lo, hi) in spec.get("factors", {}).items()))
            for target, spec in intervals.items() if spec}
