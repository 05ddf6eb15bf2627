"""WattGPU training side: load measurements, fit XGBoost, evaluate (needs the [train] extras)."""
