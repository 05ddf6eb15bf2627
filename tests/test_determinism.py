"""Bit-identical outputs across calls, processes, thread-count settings and concurrent use of one Predictor.

Concurrency design (kept < 30 s in CI): 8 threads share one Predictor; each makes 10,000 predictions, as
100 ``predict_specs`` calls of 100 rows, so the shared onnxruntime sessions run 800 concurrent
inferences and 80,000 predictions in all; every result is compared bit for bit with serial calls.
The 10,000 rows are offline/closed-loop (the Python-side server fixed point would make 80,000 of them
take minutes); 40 server rows per thread, single-row and batched, cover the server path concurrently.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import wattgpu
from wattgpu import Predictor, Workload

REPO = Path(__file__).resolve().parents[1]
FIELDS = ("power_w", "itl_s", "throughput_tok_s", "energy_per_token_j", "effective_batch", "busy_fraction")


def _rows(n: int, seed: int = 7, kinds=("offline", "closed_loop", "server")):
    """n feasible (GpuSpec, LlmSpec, Workload) triples drawn from the catalog."""
    cat = wattgpu.default_catalog()
    rng = random.Random(seed)
    gpus = [g for g in cat.gpus if g.memory_size_gb >= 40]
    llms = [m for m in cat.llms if m.total_params_b <= 14 and m.arch_class in ("decoder_transformer",
                                                                               "decoder_moe_transformer")]
    out = []
    while len(out) < n:
        kind = rng.choice(list(kinds))
        wl = Workload(kind=kind, max_batch=rng.choice([1, 8, 64, 256]),
                      qps=rng.choice([0.1, 1.0, 5.0]) if kind == "server" else None,
                      concurrency=rng.choice([1.0, 4.0, 32.0]) if kind == "closed_loop" else None,
                      input_tokens=rng.choice([64, 512, 2048]), output_tokens=rng.choice([32, 256]),
                      engine=rng.choice(["vllm", "tgi", "hf"]))
        out.append((rng.choice(gpus), rng.choice(llms), wl))
    return out


def _key(p) -> tuple:
    return tuple(float(getattr(p, f)).hex() for f in FIELDS)


def test_repeat_calls_identical():
    pred = Predictor()
    rows = _rows(200)
    a = [_key(p) for p in pred.predict_specs(rows)]
    b = [_key(p) for p in pred.predict_specs(rows)]
    c = [_key(pred.predict_specs([r])[0]) for r in rows[:50]]  # batch size does not change a row's result
    assert a == b
    assert a[:50] == c
    assert a == [_key(p) for p in Predictor().predict_specs(rows)]  # a fresh predictor / fresh sessions


_CHILD = """
import json, sys
sys.path[:0] = {paths!r}
from tests.test_determinism import _rows, _key
from wattgpu import Predictor
print(json.dumps([_key(p) for p in Predictor().predict_specs(_rows(300))]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("threads", ["1", "4", "16"])
def test_identical_across_processes_and_thread_settings(threads):
    here = [_key(p) for p in Predictor().predict_specs(_rows(300))]
    paths = [str(REPO)] + [str(REPO / d) for d in ("runtime", "train", "export")]
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
           "OPENBLAS_NUM_THREADS": threads, "ORT_NUM_THREADS": threads, "PYTHONHASHSEED": threads}
    r = subprocess.run([sys.executable, "-c", _CHILD.format(paths=paths)], capture_output=True, text=True,
                       env=env, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert [tuple(k) for k in json.loads(r.stdout)] == here


@pytest.mark.slow
def test_shared_predictor_8_threads_matches_serial():
    n_threads, per_thread, chunk = 8, 10_000, 100
    rows = _rows(per_thread, kinds=("offline", "closed_loop"))
    server = _rows(40, seed=11, kinds=("server",))
    shared = Predictor()
    serial = [_key(p) for p in Predictor().predict_specs(rows)]
    single = [_key(Predictor().predict_specs([r])[0]) for r in server]
    results: dict[int, list] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(n_threads)

    def work(t: int) -> None:
        try:
            start.wait()  # all threads hit the lazily created sessions at once
            order = list(range(0, per_thread, chunk))
            random.Random(t).shuffle(order)  # different threads run different rows at the same moment
            out: dict[int, tuple] = {}
            for i in order:
                for j, p in enumerate(shared.predict_specs(rows[i:i + chunk])):
                    out[i + j] = _key(p)
            singles = [_key(shared.predict_specs([r])[0]) for r in server[:20]]
            singles += [_key(p) for p in shared.predict_specs(server[20:])]
            results[t] = [out[k] for k in range(per_thread)] + singles
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors, errors
    assert len(results) == n_threads
    for t in range(n_threads):
        assert results[t] == serial + single, f"thread {t} differs from serial results"
