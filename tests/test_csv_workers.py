"""`predict --input` on worker processes (wattgpu.csv_workers) writes the bytes one process writes: the same
output, errors file, summary and reports, in file order; a worker that stops is no row's fault (its rows run in
the calling process, said once); an error that stops a run stops it as in one process; one process where asked,
for one chunk, and for a predictor that cannot be rebuilt."""
from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wattgpu import Predictor, batch, csv_workers
from wattgpu import errors as E
from wattgpu.bundle import ArtifactError
from wattgpu.errors import WattGPUError

from .test_csv_table import HEAD, PRICES, ROWS, many_rows  # every kind of row (server, closed loop, errors, ...)

LLM = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


def run(pred: Any, tmp_path: Path, lines: list[str], workers: int, chunk: int, tag: str, prices: Any = PRICES[0],
        on_error: str = "skip") -> tuple[bytes, bytes, Any, list[str], dict[str, str]]:
    src = tmp_path / "in.csv"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out, err = tmp_path / f"out-{tag}.csv", tmp_path / f"errors-{tag}.csv"
    said: list[str] = []
    examples: dict[str, str] = {}
    summary = batch.predict_csv(str(src), str(out), on_error=on_error, prices=prices, predictor=pred, chunk=chunk,
                                errors_path=str(err), report=said.append, lenient=True, examples=examples,
                                workers=workers)
    return out.read_bytes(), err.read_bytes(), summary, said, examples


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("prices", PRICES)
def test_workers_write_what_one_process_writes(pred: Predictor, tmp_path: Path, workers: int, prices: Any) -> None:
    lines = [HEAD] + [ROWS[i % len(ROWS)] for i in range(97)]  # 13 chunks of 8 rows, the last short
    one = run(pred, tmp_path, lines, 1, 8, "one", prices)
    many = run(pred, tmp_path, lines, workers, 8, "many", prices)
    assert many == one
    assert one[2].skipped > 0 and b"overloaded" in one[0]


def test_many_varied_rows_over_workers(pred: Predictor, tmp_path: Path) -> None:
    lines = many_rows(pred, 700)
    assert run(pred, tmp_path, lines, 3, 64, "many") == run(pred, tmp_path, lines, 1, 64, "one")


def _chunk(pairs: list[tuple[str, str]]) -> list[Any]:
    return [(k + 2, {"gpu": g, "llm": m}, None) for k, (g, m) in enumerate(pairs)]


def test_the_router_keeps_each_pair_with_one_process_and_shares_rows_out() -> None:
    """Many (GPU, LLM) pairs: every pair goes to one process for the whole run (its memos then serve all its
    set-ups), and the processes answer about as many rows each."""
    router = csv_workers._Router(3)
    seen: dict[tuple[str, str], set[int]] = {}
    for c in range(6):
        pairs = [(f"gpu{(k * 7 + c) % 23}", f"llm{(k * 3 + c) % 11}") for k in range(200)]
        owners = router.owners(_chunk(pairs))
        assert len(owners) == 200 and set(owners) <= {0, 1, 2}
        assert max(owners.count(o) for o in range(3)) <= csv_workers.BALANCE * 200 / 3
        for pair, o in zip(pairs, owners):
            seen.setdefault(pair, set()).add(o)
    assert all(len(o) == 1 for o in seen.values())
    assert max(router.load) - min(router.load) <= 0.1 * sum(router.load) / 3


def test_the_router_splits_a_chunk_of_few_pairs_evenly() -> None:
    """One pair in a chunk (a sweep of one model on one GPU): the chunk is cut into equal runs of rows, so no
    process is left idle; two pairs in unequal numbers likewise."""
    router = csv_workers._Router(2)
    owners = router.owners(_chunk([("NVIDIA L4", LLM)] * 100))
    assert owners == [0] * 50 + [1] * 50
    owners = router.owners(_chunk([("NVIDIA L4", LLM)] * 90 + [("NVIDIA A10", LLM)] * 10))
    assert owners.count(0) == owners.count(1) == 50


def test_one_pair_over_workers(pred: Predictor, tmp_path: Path) -> None:
    """A file of one (GPU, LLM) pair with varied workloads, its chunks split evenly: the bytes of one process."""
    lines = ["llm,gpu,input_tokens,output_tokens,max_batch"]
    lines += [f"{LLM},NVIDIA L4,{64 + 37 * k % 900},{16 + 11 * k % 300},{1 + k % 64}" for k in range(90)]
    many = run(pred, tmp_path, lines, 2, 16, "many")
    assert many == run(pred, tmp_path, lines, 1, 16, "one")
    assert many[2].predicted == 90


def test_a_chunk_a_multiple_of_the_file(pred: Predictor, tmp_path: Path) -> None:
    lines = [HEAD] + [ROWS[i % len(ROWS)] for i in range(40)]  # 5 full chunks: no short last one
    assert run(pred, tmp_path, lines, 2, 8, "many") == run(pred, tmp_path, lines, 1, 8, "one")


def test_stop_at_the_first_bad_row_as_one_process(pred: Predictor, tmp_path: Path, capsys: Any) -> None:
    good = [r for r in ROWS if "plain" in r or "server" == r.rsplit(",", 1)[-1]]
    lines = [HEAD] + good * 10 + [ROWS[12]] + good * 10  # the bad row in a worker's chunk
    src = tmp_path / "in.csv"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    seen = []
    for workers in (1, 3):
        with pytest.raises(batch.RowError) as info:
            batch.predict_csv(str(src), "-", on_error="stop", predictor=pred, chunk=4, lenient=True, workers=workers)
        seen.append((str(info.value), capsys.readouterr().out))
    assert seen[0] == seen[1]
    before = 10 * len(good)
    assert f"line {before + 2}:" in seen[0][0] and seen[0][1].count("\n") == before + 1  # the header and the rows before it


BOOT_EXIT = "import sys; sys.exit(5)"
# A worker that answers its first chunk and then dies without a word (as one killed would).
START = "from wattgpu.batch import csv_worker\ncsv_worker()"
assert START in csv_workers.BOOT
BOOT_DIES = csv_workers.BOOT.replace(START, START.replace("csv_worker()", "") + """
import os
from wattgpu import csv_workers as c
answer = c._Answerer.answer
seen = []
def once(self, part):
    seen.append(1)
    if len(seen) == 2:
        os._exit(9)
    return answer(self, part)
c._Answerer.answer = once
csv_worker()
""")


@pytest.mark.parametrize("boot, why", [(BOOT_EXIT, "a worker exited with status 5"),
                                       (BOOT_DIES, "a worker exited with status 9")])
def test_a_worker_that_stops_hands_its_rows_back(pred: Predictor, tmp_path: Path, monkeypatch: Any, boot: str,
                                                 why: str) -> None:
    lines = [HEAD] + [ROWS[i % len(ROWS)] for i in range(130)]
    one = run(pred, tmp_path, lines, 1, 8, "one")
    monkeypatch.setattr(csv_workers, "BOOT", boot)
    many = run(pred, tmp_path, lines, 2, 8, "many")
    assert many[:3] == one[:3] and many[4] == one[4]
    warned = [m for m in many[3] if m.startswith("warning: CSV worker")]
    assert len(warned) == 1 and why in warned[0] and "the remaining rows run in this process" in warned[0]
    assert [m for m in many[3] if m not in warned] == one[3]


def test_a_worker_that_cannot_be_started(pred: Predictor, tmp_path: Path, monkeypatch: Any) -> None:
    lines = [HEAD] + [ROWS[i % len(ROWS)] for i in range(30)]
    one = run(pred, tmp_path, lines, 1, 8, "one")
    monkeypatch.setattr(csv_workers.sys, "executable", str(tmp_path / "python3-not-installed"))
    many = run(pred, tmp_path, lines, 2, 8, "many")
    assert many[:3] == one[:3]
    assert any("cannot start a worker process" in m for m in many[3])


def test_a_damaged_bundle_stops_the_run_from_a_worker(tmp_path: Path) -> None:
    import wattgpu

    models = tmp_path / "models"
    shutil.copytree(Path(wattgpu.__file__).parent / "models", models)
    pred = Predictor(str(models))
    pred.predict("NVIDIA L4", LLM)  # every file checked and loaded here, before the damage
    with open(models / "itl.onnx", "r+b") as f:
        f.seek(100)
        f.write(b"\x00damaged\x00")
    lines = [HEAD] + [ROWS[0]] * 40
    with pytest.raises(ArtifactError, match="itl.onnx"):
        run(pred, tmp_path, lines, 2, 8, "many")
    run(pred, tmp_path, lines, 1, 8, "one")  # this process checked its files before: it goes on


class _Spy:
    def __init__(self, *a: Any, **k: Any) -> None:
        raise AssertionError("a worker process was started")


@pytest.mark.parametrize("how", ["workers=1", "default", "env", "one chunk", "subclass", "embedded"])
def test_one_process(pred: Predictor, tmp_path: Path, monkeypatch: Any, how: str) -> None:
    """One process: when asked, by default in Python (the CLI asks for the CPUs), for a file of one chunk, for a
    predictor that cannot be rebuilt, and where sys.executable is an application embedding Python."""
    monkeypatch.setattr(csv_workers.subprocess, "Popen", _Spy)
    lines = [HEAD] + [ROWS[i % len(ROWS)] for i in range(8 if how == "one chunk" else 40)]
    monkeypatch.setenv("WATTGPU_THREADS", "1" if how == "env" else "4")
    if how == "embedded":
        monkeypatch.setattr(csv_workers.sys, "executable", "/usr/bin/uwsgi")
    p = type("Mine", (Predictor,), {})() if how == "subclass" else pred
    src = tmp_path / "in.csv"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    kw = {} if how == "default" else {"workers": 1 if how == "workers=1" else None}
    summary = batch.predict_csv(str(src), str(tmp_path / "out.csv"), predictor=p, chunk=8, lenient=True, **kw)
    assert summary.rows_read == len(lines) - 1


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "2", 2000])
def test_workers_argument_is_checked(pred: Predictor, tmp_path: Path, bad: Any) -> None:
    src = tmp_path / "in.csv"
    src.write_text(HEAD + "\n" + ROWS[0] + "\n", encoding="utf-8")
    with pytest.raises(WattGPUError, match="workers = .* is invalid; expected a whole number from 1 to 1024"):
        batch.predict_csv(str(src), str(tmp_path / "out.csv"), predictor=pred, workers=bad)


def _errors(pred: Predictor) -> list[WattGPUError]:
    made: list[WattGPUError] = [E.ConfigFileError("a.csv", "is odd"), E.ArtifactError("x: damaged"),
                                E.SpecValidationError("workload", "qps", -1.0, "a positive number"),
                                E.ArgumentTypeError("x: expected a list")]
    for call in (lambda: pred.resolve_gpu("Nope GPU"), lambda: pred.predict("NVIDIA Tesla T4", LLM),
                 lambda: pred.resolve_llm("nope/not-an-llm")):
        try:
            call()
        except WattGPUError as exc:
            made.append(exc)
    return made + [batch.RowError(7, "a problem", e) for e in made] + [batch.RowError(3, "bad", column="qps")]


def test_every_error_crosses_a_process_as_it_is(pred: Predictor) -> None:
    for exc in _errors(pred):
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is type(exc) and back.args == exc.args and str(back) == str(exc)
        assert {k: v for k, v in vars(back).items() if k != "cause"} == \
               {k: v for k, v in vars(exc).items() if k != "cause"}
        if isinstance(exc, batch.RowError) and exc.cause is not None:
            assert type(back.cause) is type(exc.cause) and str(back.cause) == str(exc.cause)
        assert getattr(back, "exit_code") == getattr(exc, "exit_code")


def test_the_cli_on_workers_writes_what_one_process_writes(pred: Predictor, tmp_path: Path) -> None:
    """The CLI on a file of more than one chunk (batch.CHUNK_ROWS rows), on 2 processes and on 1: the same
    output file and the same messages."""
    lines = [HEAD] + [ROWS[i % len(ROWS)] for i in range(batch.CHUNK_ROWS + 900)]
    src = tmp_path / "in.csv"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    got = []
    for threads in ("2", "1"):
        dst = tmp_path / f"out-{threads}.csv"
        env = dict(os.environ, WATTGPU_THREADS=threads)
        r = subprocess.run([sys.executable, "-m", "wattgpu.cli", "predict", "--input", str(src), "--output", str(dst),
                            "--lenient"], env=env, capture_output=True, text=True, timeout=300)
        got.append((r.returncode, r.stderr.replace(str(dst), "OUT"), dst.read_bytes()))
    assert got[0] == got[1]
    assert got[0][0] == 1 and "skipped" in got[0][1]


def test_hostile_cells_and_relative_spec_files_over_workers(pred: Predictor, tmp_path: Path, monkeypatch: Any) -> None:
    """Cells that are not numbers, out of range, device files, a GPU spec file named relative to the working
    directory (the workers run where the caller runs): the same bytes on workers as in one process."""
    import json

    gpu = dict(vars(pred.resolve_gpu("NVIDIA A30")), name="What-if A30")
    (tmp_path / "whatif.json").write_text(json.dumps({k: v for k, v in gpu.items() if v is not None}))
    monkeypatch.chdir(tmp_path)
    head = "llm,gpu,workload,qps,max_batch,input_tokens,output_tokens,gpu_memory_utilization,engine"
    bad = [("max_batch", "nan"), ("max_batch", "inf"), ("input_tokens", "1e400"), ("output_tokens", "-5"),
           ("qps", "nan"), ("gpu_memory_utilization", "2"), ("engine", "llama.cpp"), ("workload", "burst"),
           ("gpu", "/dev/zero"), ("gpu", "whatif.json"), ("gpu", "./whatif.json"), ("llm", ""), ("gpu", "Nope"),
           ("qps", "1e-320"), ("max_batch", "65536")]
    lines = [head]
    for i in range(90):
        cells = dict.fromkeys(head.split(","), "")
        cells.update(llm=LLM, gpu="NVIDIA A30")
        col, val = bad[i % len(bad)]
        cells[col] = val
        if col == "qps":
            cells["workload"] = "server"
        lines.append(",".join(cells.values()))
    one = run(pred, tmp_path, lines, 1, 8, "one")
    assert run(pred, tmp_path, lines, 3, 8, "many") == one
    assert b"What-if A30" in one[0] and one[2].skipped > 0
