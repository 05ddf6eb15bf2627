"""Measurement records → (GPU, LLM, workload) triples → feature columns and targets."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from wattgpu import features as F
from wattgpu.quant import with_dtype
from wattgpu.specs import Catalog, GpuSpec, LlmSpec
from wattgpu.targets import ITL, POWER, forward
from wattgpu.workload import Workload

from .records import check_records

# Target column in the records for each model target.
TARGET_COLUMNS = {POWER: "power_w", ITL: "itl_s"}
DEFAULT_INPUT_TOKENS = Workload().input_tokens  # when a source does not record prompt lengths
DEFAULT_MAX_BATCH = Workload().max_batch  # when a source does not record the engine's batch cap


@dataclass
class Dataset:
    """Rows with a measured target, their raw feature columns, and grouping keys for splits."""

    records: pd.DataFrame
    cols: F.Columns
    triples: list[tuple[GpuSpec, LlmSpec, Workload]]

    def __len__(self) -> int:
        return len(self.records)

    def X(self, names: tuple[str, ...] | list[str]) -> np.ndarray:
        return F.matrix(list(names), self.cols)

    def y_physical(self, target: str) -> np.ndarray:
        return self.records[TARGET_COLUMNS[target]].to_numpy(dtype=np.float64)

    def y(self, target: str, transform: str) -> np.ndarray:
        return forward(transform, self.y_physical(target), self.cols)

    def subset(self, mask: np.ndarray) -> "Dataset":
        idx = np.flatnonzero(mask)
        return Dataset(self.records.iloc[idx].reset_index(drop=True),
                       {k: v[idx] for k, v in self.cols.items()}, [self.triples[i] for i in idx])

    @property
    def config_key(self) -> pd.Series:
        """(LLM, GPU, workload kind) configuration id: never straddles train and test in grouped CV."""
        r = self.records
        return r["llm"] + "|" + r["gpu"] + "|" + r["kind"]


def _num(x: object) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)  # type: ignore[arg-type]


def workload_of(row: pd.Series) -> Workload:
    """The Workload a measured row ran under (same class the runtime uses)."""
    inp = _num(row["input_tokens"])
    max_batch = _num(row["max_batch"])
    return Workload(
        kind=row["kind"],
        max_batch=int(round(max_batch)) if max_batch else DEFAULT_MAX_BATCH,
        qps=_num(row["qps"]),
        concurrency=_num(row["concurrency"]),
        input_tokens=max(1, int(round(inp))) if inp else DEFAULT_INPUT_TOKENS,
        output_tokens=max(1, int(round(float(row["output_tokens"])))),
        engine=row["engine"],
        num_requests=int(row["num_requests"]) if _num(row["num_requests"]) else None,
        engine_era=str(row["engine_era"]),
        itl_stat=str(row["itl_statistic"]),
        tp=int(row["x_tp"]) if _num(row.get("x_tp")) else 1,
    )


def llm_of(row: pd.Series, catalog: Catalog) -> LlmSpec:
    """The catalog LLM as the row served it: ``x_dtype`` (``auto`` when absent) applied through the runtime's
    ``--dtype`` definition (``quant.with_dtype``), so an FP8 run of a BF16 catalog LLM reads 1 byte per weight
    and multiplies in FP8 where the GPU has FP8 tensor cores, exactly as ``wattgpu predict --dtype fp8`` does."""
    llm = catalog.llm(row["llm"])
    dtype = row.get("x_dtype", "auto")
    dtype = "auto" if dtype is None or (isinstance(dtype, float) and math.isnan(dtype)) else str(dtype)
    if dtype != "auto" and llm.quantized:
        raise ValueError(f"row {row['row_id']}: x_dtype {dtype!r} on {llm.name}, whose catalog row is already "
                         f"quantised ({llm.precision}); map the row to a 16-bit catalog LLM or set x_dtype 'auto'")
    return with_dtype(llm, dtype)


def build_dataset(records: pd.DataFrame, catalog: Catalog, target: str | None = None) -> Dataset:
    """Join records with the catalog (each LLM at the row's served ``x_dtype``); keep rows with a finite target
    when ``target`` is given."""
    check_records(records)
    recs = records
    if target is not None:
        col = TARGET_COLUMNS[target]
        recs = recs[np.isfinite(recs[col].to_numpy(dtype=np.float64)) & (recs[col] > 0)]
    recs = recs.reset_index(drop=True)
    triples = [(catalog.gpu(r["gpu"]), llm_of(r, catalog), workload_of(r)) for _, r in recs.iterrows()]
    cols = F.columns(triples) if triples else {}
    return Dataset(recs, cols, triples)
