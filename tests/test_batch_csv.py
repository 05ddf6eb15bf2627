"""`wattgpu predict --input/--output`: many rows, vectorised, bad rows by line number."""
import csv

import numpy as np
import pytest
from click.testing import CliRunner

import wattgpu
from wattgpu.cli import main
from wattgpu.predictor import Predictor

LLM = "meta-llama/Llama-3.1-8B-Instruct"
ROWS = [
    "llm,gpu,workload,qps,output_tokens,note",
    f"{LLM},NVIDIA A30,server,0.017,,a",
    f"{LLM},NVIDIA Tesla T4,,,,b",
    f"{LLM},Nope GPU,,,,c",
    f"{LLM},NVIDIA L4,offline,,abc,d",
    f"{LLM},NVIDIA L4,offline,,128,e",
]


def _write(tmp_path, lines):
    p = tmp_path / "in.csv"
    p.write_text("\n".join(lines) + "\n")
    return p


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_skip_reports_lines_and_writes_error_column(tmp_path):
    src, dst = _write(tmp_path, ROWS), tmp_path / "out.csv"
    r = CliRunner().invoke(main, ["predict", "--input", str(src), "--output", str(dst), "--lenient"])
    assert r.exit_code == 1, r.output  # some rows skipped
    assert "warning:" in r.stderr and "column 'note' is not an input column" in r.stderr
    assert ("rows read 5, predicted 2, skipped 3 (invalid value 1, unknown GPU or LLM 1, "
            "does not fit in GPU memory 1)") in r.stderr
    for line in (3, 4, 5):
        assert f"error: line {line}:" in r.stderr
    out = _read(dst)
    assert [row["note"] for row in out] == ["a", "b", "c", "d", "e"]
    assert out[0]["error"] == "" and out[4]["error"] == ""
    assert "does not fit" in out[1]["error"] and "Unknown GPU" in out[2]["error"] and "output_tokens" in out[3]["error"]
    # same numbers as the API
    api = wattgpu.predict("NVIDIA A30", LLM, kind="server", qps=0.017)
    assert float(out[0]["power_w"]) == pytest.approx(api.power_w)
    assert float(out[0]["kwh_per_mtok"]) == pytest.approx(api.energy_per_token_j / 3.6)
    api_l4 = wattgpu.predict("NVIDIA L4", LLM, output_tokens=128)
    assert float(out[4]["itl_s"]) == pytest.approx(api_l4.itl_s)


def test_stop_exits_2_naming_the_line(tmp_path):
    src, dst = _write(tmp_path, ROWS), tmp_path / "out.csv"
    r = CliRunner().invoke(main, ["predict", "--input", str(src), "--output", str(dst), "--on-error", "stop",
                                  "--lenient"])
    assert r.exit_code == 2
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert errors == [errors[0]] and errors[0].startswith("error: line 3:")
    assert not dst.exists()


def test_bad_invocations(tmp_path):
    src = _write(tmp_path, ROWS)
    r = CliRunner().invoke(main, ["predict", "--input", str(src)])
    assert r.exit_code == 2 and "--output" in r.stderr
    nohead = _write(tmp_path, ["a,b", "1,2"])
    r = CliRunner().invoke(main, ["predict", "--input", str(nohead), "--output", str(tmp_path / "o.csv")])
    assert r.exit_code == 2 and "llm and gpu" in r.stderr and "separates" not in r.stderr
    for sep in (";", "\t"):  # a spreadsheet's other export formats: the message names the separator
        other = _write(tmp_path, [sep.join(["llm", "gpu"]), sep.join(["meta-llama/Llama-3.1-8B-Instruct", "NVIDIA A30"])])
        r = CliRunner().invoke(main, ["predict", "--input", str(other), "--output", str(tmp_path / "o.csv")])
        assert r.exit_code == 2 and f"separates columns with {sep!r}: separate them with commas" in r.stderr
    r = CliRunner().invoke(main, ["predict", "--input", str(tmp_path / "missing.csv"), "--output", str(tmp_path / "o.csv")])
    assert r.exit_code == 2


def test_thousands_of_rows_in_one_vectorised_pass(tmp_path, monkeypatch):
    # 80 GB and more: every row's cap (1-64) fits in memory, so its capacity grid's limit is its cap
    gpus = ["NVIDIA A100 PCIe 80GB", "NVIDIA H20", "NVIDIA A100 SXM4 80GB", "NVIDIA H100 SXM5 80GB"]
    lines = ["llm,gpu,max_batch,input_tokens"] + [f"{LLM},{gpus[i % 4]},{1 + i % 64},{128 + i % 900}" for i in range(3000)]
    src, dst = _write(tmp_path, lines), tmp_path / "out.csv"
    calls = []
    orig = Predictor._evaluate

    def counting(self, cols, targets=None):
        calls.append(len(cols["eff_batch"]))
        return orig(self, cols, targets)

    monkeypatch.setattr(Predictor, "_evaluate", counting)
    from wattgpu.batch import predict_csv

    n_ok, n_bad = predict_csv(str(src), str(dst), predictor=Predictor())
    assert (n_ok, n_bad) == (3000, 0)
    # one onnxruntime pass for all rows (chunk size 4096), plus one capacity pass over the distinct engine
    # set-ups (GPU × batch cap × prompt length here: all 3000 distinct) at their distinct grid batches (ITL
    # model), where set-ups that differ only in their cap (900 GPU × prompt pairs here) evaluate each model
    # concurrency of their grids once, plus the power model at each set-up's chosen and peak grid points
    from wattgpu.serving.capacity import batch_grid, load_point

    learned = "server" in Predictor().schema.domain.get("kinds", ())
    caps = np.array([1.0 + i % 64 for i in range(3000)])
    grid, points = batch_grid(caps)
    shared = {(i % 4, 128 + i % 900, level)  # (GPU, prompt length, model concurrency)
              for i in range(3000)
              for level in np.asarray(load_point(grid[i, :points[i]], np.full(points[i], caps[i]), learned)[1]).tolist()}
    assert len(shared) < int(points.sum())
    assert calls[0] == 3000 and len(calls) == 3 and calls[1] == len(shared)
    assert 3000 <= calls[2] <= 2 * 3000
    out = _read(dst)
    assert len(out) == 3000 and all(float(r["power_w"]) > 0 for r in out)


def test_a_row_that_does_not_fit_names_the_cells_that_set_its_memory(tmp_path) -> None:
    """A valid gpu_memory_utilization that leaves too little room: the row error says the model does not
    fit and names the row's memory cells, so the file's author knows which cell to change."""
    from wattgpu import Predictor
    from wattgpu.batch import predict_csv

    src = tmp_path / "in.csv"
    src.write_text("llm,gpu,gpu_memory_utilization,input_tokens\n"
                   "meta-llama/Llama-3.1-8B-Instruct,NVIDIA A30,0.5,512\n", encoding="utf-8")
    messages: list[str] = []
    summary = predict_csv(str(src), str(tmp_path / "out.csv"), predictor=Predictor(), report=messages.append)
    assert summary.skipped == 1 and summary.exit_code == 1
    (msg,) = messages
    assert "does not fit on NVIDIA A30" in msg
    assert "column 'gpu_memory_utilization' = 0.5" in msg and "column 'input_tokens' = 512" in msg


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_utf16_csv_is_named_as_utf16(tmp_path, encoding):
    src = tmp_path / "in.csv"
    src.write_bytes("\n".join(ROWS).encode(encoding))
    r = CliRunner().invoke(main, ["predict", "--input", str(src), "--output", str(tmp_path / "o.csv")])
    assert r.exit_code == 2 and "is UTF-16 text; save the CSV as UTF-8" in r.stderr, r.stderr


def _many_bad_rows(n_bad: int) -> list[str]:
    """A sweep where most rows are skipped: unknown GPUs, bad cells and a model too big for the GPU."""
    lines = ["llm,gpu,max_batch,note"]
    for i in range(n_bad):
        lines.append([f"{LLM},Nope GPU {i},,bad", f"{LLM},NVIDIA L4,-{i + 1},bad",
                      f"meta-llama/Llama-3.1-70B-Instruct,NVIDIA L4,,bad"][i % 3])
    lines.append(f"{LLM},NVIDIA L4,8,good")
    return lines


def test_many_skipped_rows_print_ten_and_a_summary_and_the_errors_file_lists_all(tmp_path):
    src, dst, errs = _write(tmp_path, _many_bad_rows(30)), tmp_path / "out.csv", tmp_path / "errors.csv"
    r = CliRunner().invoke(main, ["predict", "--input", str(src), "--output", str(dst), "--errors", str(errs),
                                  "--lenient"])
    assert r.exit_code == 1, r.output
    assert r.stderr.count("error: line ") == 10
    # issue 32: the summary by reason, one example each, comes before the rows in file order
    lines = r.stderr.splitlines()
    head = lines.index("skipped 30 rows, by reason:")
    assert head < lines.index("first 10 skipped rows in file order:")
    for reason in ("invalid value", "unknown GPU or LLM", "does not fit in GPU memory"):
        assert any(line.startswith(f"  {reason}: 10 (e.g. line ") for line in lines[head:head + 4]), reason
    assert "... 20 more skipped rows not shown (all in" in r.stderr
    assert ("skipped 30 (invalid value 10, unknown GPU or LLM 10, does not fit in GPU memory 10)") in r.stderr
    listed = _read(errs)
    assert [int(row["line"]) for row in listed] == list(range(2, 32))
    assert list(listed[0]) == ["line", "column", "reason", "error"]
    by_line = {int(row["line"]): row for row in listed}
    assert by_line[2]["column"] == "gpu" and by_line[2]["reason"] == "unknown GPU or LLM"
    assert by_line[3]["column"] == "max_batch" and "max_batch" in by_line[3]["error"]
    assert by_line[4]["reason"] == "does not fit in GPU memory"
    assert [row["note"] for row in _read(dst)].count("good") == 1


def test_errors_file_needs_input_and_differs_from_output(tmp_path):
    r = CliRunner().invoke(main, ["predict", "--llm", LLM, "--gpu", "NVIDIA L4", "--errors", str(tmp_path / "e.csv")])
    assert r.exit_code == 2 and "--errors goes with --input" in r.stderr
    src, dst = _write(tmp_path, ROWS), tmp_path / "out.csv"
    r = CliRunner().invoke(main, ["predict", "--input", str(src), "--output", str(dst), "--errors", str(dst)])
    assert r.exit_code == 2 and "same file" in r.stderr and not dst.exists()


def test_api_reports_every_row_unless_limited(tmp_path):
    from wattgpu.batch import predict_csv

    src = _write(tmp_path, _many_bad_rows(12))
    every: list[str] = []
    predict_csv(str(src), str(tmp_path / "a.csv"), predictor=Predictor(), report=every.append, lenient=True)
    first: list[str] = []
    predict_csv(str(src), str(tmp_path / "b.csv"), predictor=Predictor(), report=first.append, report_limit=3,
                lenient=True)
    assert every[0].startswith("warning:") and first[0] == every[0]
    every, first = every[1:], first[1:]
    assert len(every) == 12 and first == every[:3]


@pytest.mark.parametrize("column, hint", [("batch", "max_batch"), ("tokens_out", "output_tokens"),
                                          ("input_token", "input_tokens"), ("max_num_seqs", "max_batch")])
def test_unknown_column_is_an_error_naming_the_close_match(tmp_path, column, hint):
    """Issue 32 item 7: a column spelled `batch` used to be ignored (default used, exit 0)."""
    src, dst = _write(tmp_path, [f"llm,gpu,{column}", f"{LLM},NVIDIA L4,4"]), tmp_path / "out.csv"
    r = CliRunner().invoke(main, ["predict", "--input", str(src), "--output", str(dst)])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and not dst.exists()
    assert f"column {column!r} is not an input column: did you mean {hint!r}?" in r.stderr
    r = CliRunner().invoke(main, ["predict", "--input", str(src), "--output", str(dst), "--lenient"])
    assert r.exit_code == 0 and "warning:" in r.stderr and _read(dst)[0][column] == "4"


def test_predict_help_lists_the_csv_columns():
    out = CliRunner().invoke(main, ["predict", "--help"]).output
    flat = " ".join(out.split())
    for column in ("llm, gpu", "workload (or kind)", "max_batch", "output_tokens", "gpu_memory_utilization", "itl_stat"):
        assert column in flat, column


def test_output_dash_writes_the_csv_to_standard_output(tmp_path, monkeypatch):
    """Issue 40: `--output -` wrote a file named '-'; it is standard output, as in other tools."""
    src = _write(tmp_path, ROWS)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["predict", "--input", str(src), "--output", "-", "--lenient"])
    assert r.exit_code == 1, r.output  # some rows skipped, as with a file
    assert not (tmp_path / "-").exists()
    out = list(csv.DictReader(r.stdout.splitlines()))
    assert [row["note"] for row in out] == ["a", "b", "c", "d", "e"]
    assert out[0]["error"] == "" and "Unknown GPU" in out[2]["error"]
    assert "wrote standard output: rows read 5, predicted 2, skipped 3" in r.stderr
    dst = tmp_path / "out.csv"  # the same cells as a file
    CliRunner().invoke(main, ["predict", "--input", str(src), "--output", str(dst), "--lenient"])
    assert _read(dst) == out


def test_an_earlier_runs_output_column_is_overwritten_in_place_and_kept_on_a_bad_row(tmp_path):
    """Rerunning on an output CSV: a predicted row's output cells replace the old ones where the input holds
    them (same column position), a skipped row keeps its old cells; every row is the header's width."""
    from wattgpu import batch, record

    src = _write(tmp_path, ["power_w,llm,gpu,error", f"old,{LLM},NVIDIA L4,", f"old,{LLM},Nope GPU,stale"])
    dst = tmp_path / "out.csv"
    batch.predict_csv(str(src), str(dst))
    with open(dst, newline="") as f:
        rows = list(csv.reader(f))
    head = rows[0]
    assert head[:4] == ["power_w", "llm", "gpu", "error"] and head.count("power_w") == 1
    assert head[4:] == [c for c in record.csv_columns() if c != "power_w"]
    assert all(len(r) == len(head) for r in rows)
    good, bad = (dict(zip(head, r)) for r in rows[1:])
    api = wattgpu.predict("NVIDIA L4", LLM)
    assert float(good["power_w"]) == pytest.approx(api.power_w) and good["error"] == ""
    assert good["itl_80_low"] != "" and float(good["itl_s"]) == pytest.approx(api.itl_s)
    assert bad["power_w"] == "old" and "Unknown GPU" in bad["error"] and bad["itl_s"] == ""
