"""Loader for the WattGPU paper's measurement file ``watt_counts_subset.csv`` (Watt Counts subset).

The file is not shipped with this package; a user supplies it and we read it unchanged:
comma-separated, first column an unnamed integer index, then the columns in
:data:`WATT_COUNTS_COLUMNS` (schema in ``data/paper/README.md``). Four columns hold Python-style
lists of numbers as strings; they are parsed by a small hand-written number-list parser
(:func:`parse_number_list`) — nothing in the file is ever evaluated.

Three steps, usable separately:

- :func:`read_watt_counts` — read and validate the file, parse the list columns.
- :func:`derive_paper_targets` — add the paper notebook's scenario, normalised power and ITL.
- :func:`load_watt_counts` — the above, mapped onto the common record table
  (:data:`wattgpu_train.records.RECORD_COLUMNS`) with the paper's own columns kept as ``x_*``.

``paper_gpu_tdp`` and ``paper_model_params`` read the paper's spec tables
(``data/paper/gpu_features.csv`` and ``model_features.csv``, ``;``-separated).
"""
from __future__ import annotations

import csv
import math
import re
from os import PathLike
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from .records import RECORD_COLUMNS

# Columns of the published file, in order, after the unnamed index column.
WATT_COUNTS_COLUMNS: tuple[str, ...] = (
    "model",
    "gpu_type",
    "lambda_qps",
    "generation_tokens_total",
    "measurement_duration",
    "gpu_energy",
    "gpu_0_power_draw_watts_mean",
    "gpu_0_power_draw_watts_min",
    "gpu_0_power_draw_watts_max",
    "gpu_0_power_draw_watts_std",
    "time_to_first_token_seconds_events",
    "e2e_request_latency_seconds_events",
    "request_generation_tokens",
    "request_prompt_tokens",
)
LIST_COLUMNS: tuple[str, ...] = WATT_COUNTS_COLUMNS[-4:]  # Python-style lists, one value per request
NUMERIC_COLUMNS: tuple[str, ...] = WATT_COUNTS_COLUMNS[2:-4]  # lambda_qps … gpu_0_power_draw_watts_std

SOURCE = "watt_counts"
# Notebook: lambda_qps below this is server_low (0.017 qps), above it server_high (0.33 qps).
SCENARIO_QPS_SPLIT = 0.2
# Notebook: offline rows get lambda_qps = 1000 as a feature value.
OFFLINE_LAMBDA_FEATURE = 1000.0
# Protocol (sw-energy-benchmark config-v2): offline = llm.generate on the first 1000 SQuAD questions.
OFFLINE_NUM_REQUESTS = 1000
# The protocol never set vLLM's max_num_seqs, so the engine default (256) applied.
VLLM_DEFAULT_MAX_NUM_SEQS = 256
ITL_STAT = "mean per request (e2e-TTFT)/(tokens-1)"

# One number as Python's repr/str of an int or float writes it (also nan/inf, which repr(float)
# can produce). Nothing else — no names, calls, strings, nesting.
_NUMBER = re.compile(
    r"[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)\Z",
    re.IGNORECASE,
)


def parse_number_list(text: object, *, row: object = None, column: str | None = None) -> list[float]:
    """Parse ``"[0.12, 3, 1e-05]"`` into a list of floats without evaluating anything.

    An empty cell (None, NaN, blank string) and ``"[]"`` give ``[]``. A trailing comma is allowed
    (Python list syntax). Anything else — names, calls, strings, nested lists — raises ValueError
    naming ``row`` and ``column`` when given.
    """
    where = ""
    if row is not None or column is not None:
        where = f" (row {row!r}, column {column!r})"
    if text is None or text is pd.NA or (isinstance(text, float) and math.isnan(text)):
        return []
    if not isinstance(text, str):
        raise ValueError(f"expected a list of numbers as text{where}, got {type(text).__name__}")
    s = text.strip()
    if not s:
        return []
    if len(s) < 2 or s[0] != "[" or s[-1] != "]":
        raise ValueError(f"expected a list of numbers like '[0.1, 2]'{where}, got {_preview(s)}")
    inner = s[1:-1].strip()
    if not inner:
        return []
    parts = inner.split(",")
    if parts[-1].strip() == "" and len(parts) > 1:  # "[1, 2,]"
        parts = parts[:-1]
    out: list[float] = []
    for i, part in enumerate(parts):
        token = part.strip()
        if not _NUMBER.match(token):
            raise ValueError(
                f"non-numeric list element {i} {_preview(token)}{where}; only numbers are accepted"
            )
        out.append(float(token))
    return out


def _preview(s: str, n: int = 60) -> str:
    return repr(s if len(s) <= n else s[:n] + "…")


def _read_header(path: Path) -> list[str]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        try:
            return next(reader)
        except StopIteration:
            raise ValueError(f"{path}: empty file, expected the Watt Counts header") from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: is not UTF-8 text (bad byte at offset {exc.start}); expected the "
                             "Watt Counts CSV as published") from None
        except csv.Error as exc:
            raise ValueError(f"{path}: is not a readable CSV file ({exc}); expected the Watt Counts CSV") from None


def read_watt_counts(path: str | PathLike[str]) -> pd.DataFrame:
    """Read ``watt_counts_subset.csv`` exactly as published.

    Returns one row per run, indexed by the file's integer index, with the columns of
    :data:`WATT_COUNTS_COLUMNS` (others kept as they are). Numeric columns are floats; the four
    list columns hold Python lists of floats (``[]`` for empty cells and ``"[]"``).
    """
    path = Path(path)
    header = _read_header(path)
    if not header or header[0].strip() not in ("", "Unnamed: 0"):
        raise ValueError(
            f"{path}: expected the published layout with an unnamed integer index as the first "
            f"column (header starting ',model,gpu_type,…'), got first column {header[0] if header else ''!r}"
        )
    present = [h.strip() for h in header[1:]]
    missing = [c for c in WATT_COUNTS_COLUMNS if c not in present]
    if missing:
        raise ValueError(f"{path}: Watt Counts file lacks columns: {', '.join(missing)}")
    dupes = sorted({c for c in present if present.count(c) > 1})
    if dupes:
        raise ValueError(f"{path}: duplicate columns in header: {', '.join(dupes)}")

    text_cols = {c: str for c in ("model", "gpu_type", *LIST_COLUMNS)}
    try:
        df = pd.read_csv(path, index_col=0, dtype=text_cols)
    except (UnicodeDecodeError, pd.errors.ParserError) as exc:  # a bad line after a good header
        raise ValueError(f"{path}: is not a readable Watt Counts CSV ({' '.join(str(exc).split())[:200]})") from None
    df.columns = [str(c).strip() for c in df.columns]
    df.index.name = None

    if df.index.hasnans or not pd.api.types.is_integer_dtype(df.index):
        try:
            as_int = pd.to_numeric(df.index, errors="raise")
            if not np.all(np.isfinite(as_int)) or not np.all(as_int == np.round(as_int)):
                raise ValueError
            df.index = as_int.astype("int64")
        except (ValueError, TypeError):
            raise ValueError(f"{path}: the first (index) column must hold integers") from None
    if df.index.has_duplicates:
        dup = df.index[df.index.duplicated()][0]
        raise ValueError(f"{path}: duplicate index value {dup} in the first column")

    for col in ("model", "gpu_type"):
        bad = df.index[df[col].isna()]
        if len(bad):
            raise ValueError(f"{path}: row {bad[0]}: empty {col!r}")
    for col in NUMERIC_COLUMNS:
        converted = pd.to_numeric(df[col], errors="coerce")
        bad = df.index[converted.isna() & df[col].notna()]
        if len(bad):
            raise ValueError(f"{path}: row {bad[0]}, column {col!r}: not a number: {df.at[bad[0], col]!r}")
        df[col] = converted.astype("float64")
    for col in LIST_COLUMNS:
        df[col] = pd.Series(
            [parse_number_list(v, row=i, column=col) for i, v in zip(df.index, df[col])],
            index=df.index,
            dtype=object,
        )
    return df


def _scenario(lambda_qps: float, row: object) -> str:
    if pd.isna(lambda_qps):
        return "offline"
    if not lambda_qps > 0:
        raise ValueError(f"row {row!r}: lambda_qps must be empty (offline) or > 0, got {lambda_qps}")
    # Notebook: < 0.2 → server_low, > 0.2 → server_high; 0.2 itself never occurs and is put high.
    return "server_low" if lambda_qps < SCENARIO_QPS_SPLIT else "server_high"


def _server_itl(ttft: Sequence[float], e2e: Sequence[float], gen: Sequence[float]) -> float:
    """Mean over requests with ≥ 2 generated tokens of (e2e − TTFT) / (tokens − 1); NaN if none.

    The three lists are paired element by element (truncated to the shortest, as ``zip`` would);
    requests with a non-finite value are skipped.
    """
    vals = []
    for t, e, g in zip(ttft, e2e, gen):
        if g >= 2 and math.isfinite(t) and math.isfinite(e) and math.isfinite(g):
            vals.append((e - t) / (g - 1))
    return float(np.mean(vals)) if vals else float("nan")


def derive_paper_targets(
    df: pd.DataFrame, tdp_by_gpu_type: Mapping[str, float] | None = None
) -> pd.DataFrame:
    """Add the paper notebook's ``scenario``, ``normalized_power_draw`` and ``paper_itl``.

    Also adds ``lambda_qps_feature`` (1000 for offline, as the notebook does). Rows with
    ``generation_tokens_total == 0`` are dropped. ``tdp_by_gpu_type`` maps ``gpu_type`` →
    ``thermal_design_power_w`` (see :func:`paper_gpu_tdp`); without it ``normalized_power_draw`` is
    NaN, and a ``gpu_type`` it lacks raises ValueError.
    """
    out = df.loc[df["generation_tokens_total"] != 0].copy()
    out["scenario"] = [_scenario(q, i) for i, q in zip(out.index, out["lambda_qps"])]
    out["lambda_qps_feature"] = out["lambda_qps"].where(out["scenario"] != "offline", OFFLINE_LAMBDA_FEATURE)

    if tdp_by_gpu_type is None:
        out["normalized_power_draw"] = np.nan
    else:
        unknown = sorted(set(out["gpu_type"]) - set(tdp_by_gpu_type))
        if unknown:
            raise ValueError(f"no TDP for gpu_type: {', '.join(map(repr, unknown))}")
        tdp = out["gpu_type"].map(lambda g: float(tdp_by_gpu_type[g]))
        out["normalized_power_draw"] = out["gpu_0_power_draw_watts_mean"] / tdp

    offline_itl = out["measurement_duration"] / out["generation_tokens_total"]
    server_itl = pd.Series(
        [
            _server_itl(t, e, g)
            for t, e, g in zip(
                out["time_to_first_token_seconds_events"],
                out["e2e_request_latency_seconds_events"],
                out["request_generation_tokens"],
            )
        ],
        index=out.index,
        dtype="float64",
    )
    out["paper_itl"] = offline_itl.where(out["scenario"] == "offline", server_itl)
    return out


def _mean_or_nan(values: Sequence[float]) -> float:
    arr = np.asarray(values, dtype="float64")
    arr = arr[np.isfinite(arr)]
    return float(arr.mean()) if arr.size else float("nan")


def load_watt_counts(
    path: str | PathLike[str],
    *,
    model_params: Mapping[str, tuple[float, float]] | None = None,
    gpu_name_map: Mapping[str, str] | None = None,
    tdp_by_gpu_type: Mapping[str, float] | None = None,
) -> pd.DataFrame:
    """Read the Watt Counts file and return the record table (``RECORD_COLUMNS`` then ``x_*``).

    - ``model_params``: HF id → (total_b_params, active_b_params) (:func:`paper_model_params`).
      When given, rows of models whose total != active (MoE) are dropped, as the paper keeps dense
      models only; models it does not list are kept.
    - ``gpu_name_map``: ``gpu_type`` → catalog GPU name; unmapped names pass through unchanged.
      Note: ``NVIDIA H200`` is the driver name of the H200 SXM, so per the GPU catalog README the
      paper's H200 runs are H200 SXM (the paper's feature row mixes NVL specs with the SXM TDP).
    - ``tdp_by_gpu_type``: ``gpu_type`` → TDP (W) for ``x_normalized_power_draw``
      (:func:`paper_gpu_tdp`); NaN without it.
    """
    raw = read_watt_counts(path)
    df = derive_paper_targets(raw, tdp_by_gpu_type)
    if model_params is not None:
        def is_dense(model: str) -> bool:
            if model not in model_params:
                return True
            total, active = model_params[model]
            return bool(np.isclose(float(total), float(active)))

        df = df.loc[[is_dense(m) for m in df["model"]]]

    gmap = dict(gpu_name_map or {})
    offline = (df["scenario"] == "offline").to_numpy()
    gen_total = df["generation_tokens_total"].to_numpy(dtype="float64")
    e2e_mean = np.array([_mean_or_nan(v) for v in df["e2e_request_latency_seconds_events"]], dtype="float64")
    input_tokens = np.array([_mean_or_nan(v) for v in df["request_prompt_tokens"]], dtype="float64")
    output_tokens = np.array([_mean_or_nan(v) for v in df["request_generation_tokens"]], dtype="float64")
    # Offline runs may not list per-request token counts: spread the total over the 1000 requests.
    fill = offline & np.isnan(output_tokens)
    output_tokens[fill] = gen_total[fill] / OFFLINE_NUM_REQUESTS
    qps = np.where(offline, np.nan, df["lambda_qps"].to_numpy(dtype="float64"))
    # Little's law over the measured requests: mean requests in flight = arrival rate × mean latency.
    # Offline runs queue everything at once, and the file gives no batch trace: unknown.
    concurrency = np.where(offline, np.nan, qps * e2e_mean)
    # Offline rows carry no per-request decode timing (empty TTFT list, one e2e value for the whole
    # batch), so the per-sequence ITL is unknown there; the notebook's offline "ITL" is the
    # whole-run seconds per token, kept in system_s_per_token and x_paper_itl.
    itl = np.where(offline, np.nan, df["paper_itl"].to_numpy(dtype="float64"))

    n = len(df)
    rec = pd.DataFrame(
        {
            "row_id": [f"{SOURCE}:{i}" for i in df.index],
            "source": [SOURCE] * n,
            "llm": [str(m) for m in df["model"]],
            "gpu": [gmap.get(g, g) for g in df["gpu_type"]],
            "kind": np.where(offline, "offline", "server"),
            "scenario": df["scenario"].to_numpy(),
            "engine": ["vllm"] * n,
            "max_batch": np.full(n, float(VLLM_DEFAULT_MAX_NUM_SEQS)),
            "concurrency": concurrency,
            "qps": qps,
            "num_requests": np.where(offline, float(OFFLINE_NUM_REQUESTS), np.nan),
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "power_w": df["gpu_0_power_draw_watts_mean"].to_numpy(dtype="float64"),
            "itl_s": itl,
            "system_s_per_token": (df["measurement_duration"] / df["generation_tokens_total"]).to_numpy(dtype="float64"),
            "itl_stat": [ITL_STAT] * n,
            "itl_statistic": ["mean"] * n,
            # The file records no vLLM version; the paper's runs are treated as today's stack (the default).
            "engine_era": ["current"] * n,
            "x_normalized_power_draw": df["normalized_power_draw"].to_numpy(dtype="float64"),
            "x_paper_itl": df["paper_itl"].to_numpy(dtype="float64"),
            "x_lambda_qps_feature": df["lambda_qps_feature"].to_numpy(dtype="float64"),
            "x_gpu_type": [str(g) for g in df["gpu_type"]],
        }
    )
    for col, (kind, _) in RECORD_COLUMNS.items():
        if kind == "float":
            rec[col] = rec[col].astype("float64")
        else:
            rec[col] = rec[col].astype(object)
    rec["x_gpu_type"] = rec["x_gpu_type"].astype(object)
    return rec.reset_index(drop=True)


def paper_gpu_tdp(gpu_features_csv: str | PathLike[str]) -> dict[str, float]:
    """``gpu_type`` → ``thermal_design_power_w`` from the paper's ``gpu_features.csv`` (``;``-separated)."""
    g = pd.read_csv(gpu_features_csv, sep=";", usecols=["gpu_type", "thermal_design_power_w"])
    if g["thermal_design_power_w"].isna().any():
        bad = g.loc[g["thermal_design_power_w"].isna(), "gpu_type"].tolist()
        raise ValueError(f"{gpu_features_csv}: no thermal_design_power_w for {', '.join(bad)}")
    return {str(k): float(v) for k, v in zip(g["gpu_type"], g["thermal_design_power_w"])}


def paper_model_params(model_features_csv: str | PathLike[str]) -> dict[str, tuple[float, float]]:
    """HF id → (total_b_params, active_b_params) from the paper's ``model_features.csv``.

    An empty ``active_b_params`` is read as dense (active = total).
    """
    m = pd.read_csv(model_features_csv, sep=";", usecols=["model_name", "total_b_params", "active_b_params"])
    out: dict[str, tuple[float, float]] = {}
    for name, total, active in zip(m["model_name"], m["total_b_params"], m["active_b_params"]):
        total = float(total)
        active = total if pd.isna(active) else float(active)
        out[str(name)] = (total, active)
    return out


def _norm_name(name: str) -> str:
    return " ".join(str(name).lower().replace("_", " ").split())


def catalog_gpu_map(gpu_types: Sequence[str], gpu_specs_csv: str | PathLike[str]) -> dict[str, str]:
    """``gpu_type`` → catalog GPU name via the catalog's names and ``|``-separated aliases.

    ``NVIDIA H200`` (the driver name) resolves to the H200 SXM through the catalog alias. A
    ``gpu_type`` the catalog does not know raises ValueError (rows are never dropped silently).
    """
    table = pd.read_csv(gpu_specs_csv, dtype=str)
    index: dict[str, str] = {}
    for name, aliases in zip(table["name"], table["aliases"].fillna("")):
        for key in (name, *[a for a in aliases.split("|") if a.strip()]):
            index.setdefault(_norm_name(key), name)
    out, unknown = {}, []
    for g in sorted(set(gpu_types)):
        hit = index.get(_norm_name(g))
        if hit is None:
            unknown.append(g)
        else:
            out[g] = hit
    if unknown:
        raise ValueError(f"gpu_type not in the GPU catalog (add an alias to gpu_specs.csv): {', '.join(map(repr, unknown))}")
    return out


def load_watt_counts_for_catalog(path: str | PathLike[str], data_dir: str | PathLike[str]) -> pd.DataFrame:
    """The Watt Counts file as training records whose ``gpu`` and ``llm`` are catalog names.

    Uses the paper's own tables in ``data_dir/paper`` for TDP (normalised power) and total/active
    parameters (MoE rows dropped, as the paper does), maps ``gpu_type`` through the catalog aliases,
    and drops LLMs whose catalog ``arch_class`` is not a decoder transformer (the paper's Falcon
    Mamba, for instance), like ``load_measurements`` does. Adds ``x_task`` = ``squad`` and
    ``x_precision`` = ``auto`` (vLLM dtype auto: the checkpoint's 16-bit type, float16 on V100/T4).
    """
    data_dir = Path(data_dir)
    raw_types = read_watt_counts(path)["gpu_type"].tolist()
    gmap = catalog_gpu_map(raw_types, data_dir / "catalog" / "gpu_specs.csv")
    rec = load_watt_counts(
        path,
        model_params=paper_model_params(data_dir / "paper" / "model_features.csv"),
        gpu_name_map=gmap,
        tdp_by_gpu_type=paper_gpu_tdp(data_dir / "paper" / "gpu_features.csv"),
    )
    llms = pd.read_csv(data_dir / "catalog" / "llm_configs.csv", usecols=["hf_id", "arch_class"], dtype=str)
    arch = {_norm_name(h): a for h, a in zip(llms["hf_id"], llms["arch_class"])}
    unknown = sorted({m for m in rec["llm"] if _norm_name(m) not in arch})
    if unknown:
        raise ValueError(f"LLMs not in data/catalog/llm_configs.csv: {', '.join(map(repr, unknown))}")
    keep = np.array([arch[_norm_name(m)] in ("decoder_transformer", "decoder_moe_transformer") for m in rec["llm"]],
                    dtype=bool)
    rec = rec.loc[keep].reset_index(drop=True)
    # Little's law at 0.017 qps can give < 0.001 requests in flight, below what a Workload accepts;
    # the effective decode batch is floored at 1 sequence anyway, so clipping changes no feature.
    rec["concurrency"] = rec["concurrency"].clip(lower=1e-3)
    rec["x_task"] = "squad"
    rec["x_precision"] = "auto"
    return rec
