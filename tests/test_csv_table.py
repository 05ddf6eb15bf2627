"""`predict --input`'s columnar CSV path (wattgpu.csv_table) writes the file the row-by-row path writes: one
Prediction per row, its cells from wattgpu.record.csv_row, csv.writer. Byte for byte, on files with every kind
of row (server, closed loop, offline, overloaded, invalid, unknown GPU/LLM, does not fit, calibrated, cells
that need quoting, an input column named like an output column)."""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from wattgpu import Predictor, Workload, batch, record
from wattgpu.csv_table import answer_cells, quote, text
from wattgpu.errors import WattGPUError

LLM = "meta-llama/Llama-3.1-8B-Instruct"
HEAD = "llm,gpu,workload,qps,concurrency,max_batch,input_tokens,output_tokens,tp,dtype,note"
ROWS = [
    f"{LLM},NVIDIA L4,offline,,,,,128,,,plain",
    f"{LLM},NVIDIA A30,server,0.5,,,,,,,server",
    f"{LLM},NVIDIA A30,server,1000,,,,,,,overloaded",
    f"{LLM},NVIDIA L4,closed_loop,,8,,,,,,closed loop",
    f"{LLM},NVIDIA L4,closed_loop,,5000,,,,,,\"cut, by KV\"",
    f"{LLM},NVIDIA H100 SXM5 80GB,offline,,,64,2048,512,2,,tp 2",
    f"{LLM},NVIDIA H100 SXM5 80GB,server,3,,,,,2,,tp 2 server",
    f"mistralai/Mistral-7B-Instruct-v0.3,NVIDIA A100 SXM4 80GB,offline,,,256,,,,fp8,dtype",
    f"Qwen/Qwen2.5-7B-Instruct,NVIDIA L40S,server,2,,,,,,,\"a \"\"quoted\"\" note\"",
    f"{LLM},NVIDIA Tesla T4,,,,,,,,,does not fit",
    f"{LLM},Nope GPU,,,,,,,,,unknown GPU",
    f"nope/not-an-llm,NVIDIA L4,,,,,,,,,unknown LLM",
    f"{LLM},NVIDIA L4,offline,,,,,abc,,,invalid",
    f"{LLM},NVIDIA L4,server,,,,,,,,server without qps",
    f",NVIDIA L4,,,,,,,,,empty llm",
    f"{LLM},NVIDIA L4,offline,,,,,128,,,too,many,cells",
    f"{LLM},NVIDIA L4,offline,,,,,128,,,\"line\nbreak\"",
    f"{LLM},NVIDIA L4,offline,,,,,128,,,plain again",
    f"{LLM},NVIDIA A30,server,0.5,,,,,,,server again",
    f"{LLM},NVIDIA A100 SXM4 40GB,offline,,,32,512,256,,,calibrated GPU",
]
PRICES = [(None, None, 1.0, None), (0.12, 400.0, 1.3, 2.5)]


def row_by_row(src: Path, dst: Path, predictor: Predictor, prices: Any) -> None:
    """The file as the row path writes it: a Prediction per row (batch.predict_rows), record.csv_row, csv.writer."""
    with open(src, newline="", encoding="utf-8-sig") as f:
        cols = [c.strip() for c in next(csv.reader(f))]
    fields = cols + [c for c in record.csv_columns() if c not in cols]
    fields += [] if "error" in fields else ["error"]
    at = {c: i for i, c in enumerate(fields)}
    cells_of = record.csv_row(tuple(prices) + (None,) * (4 - len(prices)))
    with open(dst, "w", newline="", encoding="utf-8") as fo:
        w = csv.writer(fo)
        w.writerow(fields)
        for _, row, r in batch.predict_rows(str(src), predictor=predictor, chunk=7):
            out = [row.get(c, "") for c in fields]
            if isinstance(r, WattGPUError):
                out[at["error"]] = getattr(r, "problem", str(r))
            else:
                for c, v in zip(record.csv_columns(), cells_of(r)):
                    out[at[c]] = v
                out[at["error"]] = ""
            w.writerow(out)


def check_same(tmp_path: Path, lines: list[str], predictor: Predictor, prices: Any = PRICES[0],
               chunk: int = 5) -> bytes:
    src, new, old = tmp_path / "in.csv", tmp_path / "new.csv", tmp_path / "old.csv"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    batch.predict_csv(str(src), str(new), predictor=predictor, prices=prices, chunk=chunk, lenient=True)
    row_by_row(src, old, predictor, prices)
    assert new.read_bytes() == old.read_bytes()
    return new.read_bytes()


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


@pytest.mark.parametrize("prices", PRICES)
def test_every_kind_of_row_as_the_row_path_writes_it(pred: Predictor, tmp_path: Path, prices: Any) -> None:
    out = check_same(tmp_path, [HEAD, *ROWS], pred, prices)
    text_out = out.decode()
    assert "is invalid" in text_out and "Unknown GPU" in text_out and "does not fit" in text_out
    assert "overloaded" in text_out and '"cut, by KV"' in text_out and '"line\r\nbreak"' not in text_out


def test_an_input_column_named_like_an_output_column(pred: Predictor, tmp_path: Path) -> None:
    head = HEAD.replace(",note", ",power_w,error,warnings")
    rows = [r + ",1.5,old error,\"w, 1\"" for r in ROWS if r.count(",") == HEAD.count(",")]
    check_same(tmp_path, [head, *rows], pred)
    check_same(tmp_path, ["power_w,llm,gpu,note", f"7,{LLM},NVIDIA L4,x", f",{LLM},Nope GPU,y"], pred)


def test_repeated_rows_over_chunks(pred: Predictor, tmp_path: Path) -> None:
    lines = [HEAD] + [ROWS[i % len(ROWS)] for i in range(150)]
    check_same(tmp_path, lines, pred, chunk=64)
    check_same(tmp_path, lines, pred, prices=PRICES[1], chunk=1)


def many_rows(pred: Predictor, n: int, seed: int = 3) -> list[str]:
    """A header and ``n`` random rows of catalog LLMs and GPUs, every workload kind, caps, lengths and TP degrees."""
    rng = np.random.default_rng(seed)
    gpus = [g.name for g in pred.catalog.gpus]
    llms = [m.name for m in pred.catalog.llms]
    kinds = ["offline", "server", "closed_loop", ""]
    lines = ["llm,gpu,workload,qps,concurrency,max_batch,output_tokens,tp"]
    for _ in range(n):
        kind = kinds[rng.integers(len(kinds))]
        lines.append(",".join([llms[rng.integers(len(llms))], gpus[rng.integers(len(gpus))], kind,
                               f"{rng.uniform(0.01, 40):.3g}" if kind == "server" else "",
                               str(rng.integers(1, 600)) if kind == "closed_loop" else "",
                               str(2 ** rng.integers(0, 10)), str(rng.integers(1, 3000)),
                               str([1, 1, 2, 4][rng.integers(4)])]))
    return lines


def test_many_varied_rows(pred: Predictor, tmp_path: Path) -> None:
    check_same(tmp_path, many_rows(pred, 400), pred, chunk=128)


def test_a_calibrated_bundle(pred: Predictor, tmp_path: Path) -> None:
    from wattgpu.calibration import calibrate
    from wattgpu.measured import runs_from_csv

    runs = tmp_path / "runs.csv"
    with runs.open("w", newline="") as f:  # SYNTHETIC 'measurements': the packaged prediction × a factor
        w = csv.writer(f)
        w.writerow(["llm", "gpu", "kind", "max_batch", "input_tokens", "output_tokens", "power_w", "itl_s"])
        for b in (8, 32, 128):
            p = pred.predict("NVIDIA A100 SXM4 40GB", LLM, Workload(max_batch=b, input_tokens=512, output_tokens=256))
            w.writerow([LLM, "NVIDIA A100 SXM4 40GB", "offline", b, 512, 256, f"{p.power_w * 0.9:.6g}",
                        f"{p.itl_s * 1.3:.6g}"])
    calibrate(runs_from_csv(str(runs), pred), pred.bundle, str(tmp_path / "cal"))
    cal = Predictor(str(tmp_path / "cal"))
    out = check_same(tmp_path, [HEAD, *ROWS], cal, PRICES[1])
    assert "calibrated" in out.decode()


def test_cells_equal_the_row_path_cell_by_cell(pred: Predictor) -> None:
    """answer_cells against record.csv_row of each Prediction of the same evaluation, a row made not finite too."""
    g, m = pred.resolve_gpu("NVIDIA L4"), pred.resolve_llm(LLM)
    rows = [(g, m, Workload()), (g, m, Workload(kind="server", qps=2.0)), (g, m, Workload(kind="closed_loop",
                                                                                          concurrency=16)),
            (pred.resolve_gpu("NVIDIA Tesla T4"), m, Workload()), (g, m, Workload(output_tokens=64))]
    for prices in PRICES:
        ev = pred.evaluate_rows(rows)
        ev.numbers["not_finite"][ev.slot[4]] = True  # as a row whose model outputs are not finite
        cells_of = record.csv_row(prices)
        for i, got in enumerate(answer_cells(ev, prices)):
            want = ev.prediction(i)
            if isinstance(want, WattGPUError):
                assert type(got) is type(want) and str(got) == str(want)
            else:
                assert got == tuple(_writer_cells(cells_of(want)))


def _writer_cells(cells: list[Any]) -> list[str]:
    buf = io.StringIO()
    csv.writer(buf).writerow(cells)
    return _split(buf.getvalue(), len(cells))


def _split(line: str, n: int) -> list[str]:
    """The cells of one csv.writer line as written (quotes kept), by re-quoting what csv.reader reads."""
    got = [quote(c) for c in next(csv.reader(io.StringIO(line)))]
    assert len(got) == n and ",".join(got) + "\r\n" == line
    return got


@pytest.mark.parametrize("value", ["", "plain", "a,b", 'say "x"', "line\nbreak", "cr\rhere", "both,\"\r\n", " lead",
                                   "tab\there", "ünï", 0.1, 1e-300, 1e22, -0.0, float("nan"), float("inf"), 3, -7,
                                   True, False, None, 2.5e-7, 123456789.125])
def test_text_is_what_csv_writer_writes(value: Any) -> None:
    buf = io.StringIO()
    csv.writer(buf).writerow(["x", value, "y"])
    assert buf.getvalue() == f"x,{text(value)},y\r\n" or value is None or isinstance(value, bool)
    if value is None:
        assert text(value) == ""
    elif isinstance(value, bool):
        assert text(value) == ("true" if value else "false")


def test_lines_are_what_csv_writer_writes() -> None:
    cells = ["a", "b,c", 'd"e', "", "f\ng", "h\ri", "plain"]
    for k in range(1, len(cells) + 1):
        for start in range(len(cells)):
            part = (cells[start:] + cells[:start])[:k]
            if k == 1 and part == [""]:
                continue  # csv.writer writes a lone empty cell as "" (never a row of this file)
            buf = io.StringIO()
            csv.writer(buf).writerow(part)
            assert batch._line(part, quote) == buf.getvalue()


def test_rows_without_warnings_of_their_own(pred: Predictor, tmp_path: Path) -> None:
    """Where results.own_warning_rows is false, a row's warnings are its set-up's alone (answer_cells writes those
    without asking row_warnings); on varied rows of every kind, and the mask is not trivially all true."""
    from wattgpu import results

    src = tmp_path / "in.csv"
    src.write_text("\n".join(many_rows(pred, 600, seed=5)) + "\n", encoding="utf-8")
    triples = [t for _, _, t in batch.resolve_rows(str(src), predictor=pred) if isinstance(t, tuple)]
    ev = pred.evaluate_rows(triples)
    good = sorted(ev.slot, key=ev.slot.__getitem__)
    rows = [ev.triples[i] for i in good]
    num, cols = ev.numbers, ev.cols
    own = results.own_warning_rows([w for _, _, w in rows], num["overloaded"], num["utilization"], cols["fit_batch"],
                                   num["raw_power_w"], np.array([g.tdp_w for g, _, _ in rows]), ev.mix)
    assert 0 < own.sum() < len(rows)
    memo = results.memo_for(pred.bundle)
    for k, row in enumerate(rows):
        whole = results.row_warnings(pred.bundle, row, memo, ev.mix.get(k), bool(num["overloaded"][k]),
                                     float(num["max_qps"][k]), int(cols["fit_batch"][k]),
                                     int(num["max_concurrency"][k]), float(num["utilization"][k]),
                                     float(num["raw_power_w"][k]))
        if not own[k]:
            assert whole == list(memo.setup_warnings(pred.bundle, *row)), row
