"""Load the catalog and the measured training records (data/ and, optionally, a Watt Counts file)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from wattgpu.specs import Catalog

from .measurements import load_measurements


def load_catalog(specs_path: Path) -> Catalog:
    return Catalog.from_json(json.loads(Path(specs_path).read_text(encoding="utf-8")))


def load_training_records(data_dir: Path, watt_counts: Path | None = None) -> pd.DataFrame:
    """Every measured record used for training (single GPU and tensor-parallel groups), in a deterministic order."""
    frames = [load_measurements(data_dir, single_gpu_only=False)]
    if watt_counts is not None:
        from .watt_counts import load_watt_counts_for_catalog

        frames.append(load_watt_counts_for_catalog(watt_counts, data_dir))
    cols = list(frames[0].columns)
    return pd.concat([f.reindex(columns=cols) for f in frames], ignore_index=True)
