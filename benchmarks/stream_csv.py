"""Streaming CSV benchmark: `wattgpu predict --input` over N rows; rows/s and peak RSS of the CLI process.

The input rows are synthetic *inputs* (catalog LLM × GPU × workload combinations), not measurements.
Peak memory must stay flat in the row count (target: 1,000,000 rows within 150 MiB peak RSS).

    python benchmarks/stream_csv.py --rows 1000000
"""
from __future__ import annotations

import argparse
import itertools
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LLMS = ["meta-llama/Llama-3.1-8B-Instruct", "mistralai/Mistral-7B-Instruct-v0.3", "Qwen/Qwen2.5-7B-Instruct"]
GPUS = ["NVIDIA A30", "NVIDIA L4", "NVIDIA H100 SXM5 80GB", "NVIDIA A100 SXM4 80GB", "NVIDIA L40S"]
WORKLOADS = [("offline", "", "64"), ("server", "0.5", "128"), ("offline", "", "256"), ("server", "2", "")]


def write_input(path: Path, rows: int) -> None:
    combos = itertools.cycle(itertools.product(LLMS, GPUS, WORKLOADS))
    with open(path, "w", encoding="utf-8") as f:
        f.write("llm,gpu,workload,qps,output_tokens,note\n")
        for i in range(rows):
            llm, gpu, (kind, qps, out) = next(combos)
            f.write(f"{llm},{gpu},{kind},{qps},{out},r{i}\n")


def run(rows: int, workdir: Path) -> dict[str, float]:
    src, dst = workdir / "in.csv", workdir / "out.csv"
    write_input(src, rows)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(ROOT / d) for d in ("runtime",)))
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    res = subprocess.run([sys.executable, "-m", "wattgpu.cli", "predict", "--input", str(src), "--output", str(dst),
                          "--lenient"],  # the "note" column is copied through
                         env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if res.returncode not in (0, 1):
        raise SystemExit(f"CLI failed ({res.returncode}): {res.stderr[-2000:]}")
    with open(dst, encoding="utf-8") as f:
        out_rows = sum(1 for _ in f) - 1
    if out_rows != rows:
        raise SystemExit(f"wrote {out_rows} rows, expected {rows}")
    return {"rows": rows, "wall_s": wall, "rows_per_s": rows / wall, "peak_rss_mib": max(peak_kib, before) / 1024,
            "exit": res.returncode, "summary": res.stderr.strip().splitlines()[-1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--max-rss-mib", type=float, default=150.0)
    args = ap.parse_args()
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.rows:  # each run in its own child process: RUSAGE_CHILDREN peaks only grow, so run small first
            r = run(n, Path(tmp))
            worst = max(worst, r["peak_rss_mib"])
            print(f"{r['rows']:>9} rows  {r['wall_s']:7.1f} s  {r['rows_per_s']:8.0f} rows/s  "
                  f"peak RSS {r['peak_rss_mib']:6.1f} MiB  exit {r['exit']}  ({r['summary']})", flush=True)
    print(f"peak RSS {worst:.1f} MiB (target ≤ {args.max_rss_mib:g} MiB): {'OK' if worst <= args.max_rss_mib else 'MISSED'}")
    sys.exit(0 if worst <= args.max_rss_mib else 1)


if __name__ == "__main__":
    main()
