"""POST /v1/predict/batch.csv: the CSV of ``wattgpu predict --input`` over HTTP (issue 40 item 3).

In-process through httpx's ASGI transport; the answer is compared cell by cell with the CLI's output
file for the same input, so the two cannot drift apart.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the service tests need the serve extra: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="the service tests need httpx (in the test extra)")

from click.testing import CliRunner  # noqa: E402

from wattgpu import record  # noqa: E402
from wattgpu.batch import INPUT_COLUMNS  # noqa: E402
from wattgpu.service import create_app  # noqa: E402
from wattgpu.service.inputs import MAX_BATCH_ROWS  # noqa: E402

from .service_helpers import call  # noqa: E402

LLM = "meta-llama/Llama-3.1-8B-Instruct"
PATH = "/v1/predict/batch.csv"
GOOD = (f"llm,gpu,workload,qps,concurrency,max_batch,dtype\n"
        f"{LLM},A30,server,0.5,,,\n"
        f"Qwen/Qwen2.5-7B-Instruct,L40S,closed_loop,,16,64,\n"
        f"{LLM},H100 SXM,,,,,fp8\n")
BAD = (f"{LLM},A3O,,,,,\n"            # unknown GPU: did-you-mean in the error cell
       f"{LLM},A30,server,-1,,,\n"     # a bad workload cell, named by its column
       f",A30,,,,,\n")                 # an empty llm cell


@pytest.fixture(scope="module")
def app() -> Any:
    return create_app()


def _post(app: Any, text: str | bytes) -> Any:
    raw = text.encode() if isinstance(text, str) else text
    return call(app, "POST", PATH, content=raw, headers={"Content-Type": "text/csv"})


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _cli_csv(tmp_path: Path, text: str) -> str:
    from wattgpu.cli import main

    src, dst = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_text(text)
    res = CliRunner().invoke(main, ["predict", "--input", str(src), "--output", str(dst)], catch_exceptions=False)
    assert res.exit_code in (0, 1), res.output
    return dst.read_text()


def test_csv_answer_equals_the_clis_output_file(app: Any, tmp_path: Path) -> None:
    r = _post(app, GOOD + BAD)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    assert (r.headers["x-rows-predicted"], r.headers["x-rows-failed"]) == ("3", "3")
    got, cli = _rows(r.text), _rows(_cli_csv(tmp_path, GOOD + BAD))
    header = next(csv.reader(io.StringIO(r.text)))
    # the input columns as sent, then every output column (wattgpu.record), then error
    assert header == ["llm", "gpu", "workload", "qps", "concurrency", "max_batch", "dtype",
                      *record.csv_columns(), "error"]
    assert len(got) == len(cli) == 6
    for mine, theirs in zip(got[:3], cli[:3]):
        assert mine == theirs  # every cell, numbers as the CLI writes them
        assert mine["error"] == "" and float(mine["power_w"]) > 0
    assert got[0]["gpu_resolved"] == "NVIDIA A30" and got[2]["dtype"] == "fp8"
    assert "NVIDIA A30" in got[3]["error"] and "A3O" in got[3]["error"]
    assert "qps" in got[4]["error"] and got[4]["error"] == cli[4]["error"]
    assert "'llm' is empty" in got[5]["error"]
    for row in got[3:]:
        assert all(row[c] == "" for c in record.csv_columns())


def test_csv_refuses_paths_and_never_reads_them(app: Any, tmp_path: Path) -> None:
    spec = tmp_path / "gpu.json"
    spec.write_text('{"name": "x"}')
    r = _post(app, f"llm,gpu\n{LLM},{spec}\n{LLM},./gpu.json\n{tmp_path}/cfg.json,A30\n")
    assert r.status_code == 200
    errors = [row["error"] for row in _rows(r.text)]
    assert all("looks like a file path" in e and "never reads files" in e for e in errors), errors


@pytest.mark.parametrize("body,status,needle", [
    (b"", 422, "is empty"),
    (b"model,gpu\nx,A30\n", 422, "llm and gpu"),
    (b"llm,gpu,batch\nx,A30,4\n", 422, "did you mean 'max_batch'"),
    (b"llm,gpu\n", 422, "no data rows"),
    (b"llm,gpu\n\xff\xfe,A30\n", 400, "UTF-8"),
    (b"llm,gpu\nx,A3\x000\n", 422, "NUL"),
], ids=["empty", "no-header", "typo-column", "header-only", "not-utf8", "nul"])
def test_bad_csv_bodies_are_errors_as_data(app: Any, body: bytes, status: int, needle: str) -> None:
    r = _post(app, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["field"] == "<body>" and needle in err["message"], err
    assert "--" not in err["message"] and "file" not in err["message"].replace("file path", ""), err


def test_row_and_size_limits(app: Any) -> None:
    many = "llm,gpu\n" + f"{LLM},A30\n" * (MAX_BATCH_ROWS + 1)
    r = _post(app, many)
    assert r.status_code == 422 and f"{MAX_BATCH_ROWS:,}" in r.json()["error"]["message"]
    big = "llm,gpu\n" + ("x" * 1000 + ",A30\n") * 1100
    assert _post(app, big).status_code == 413


def test_every_input_column_is_read(app: Any) -> None:
    # each input column of `predict --input` is accepted (none refused as unknown); values are the defaults'
    r = _post(app, ",".join(INPUT_COLUMNS) + "\n" + f"{LLM},A30" + "," * (len(INPUT_COLUMNS) - 2) + "\n")
    assert r.status_code == 200, r.text
    (row,) = _rows(r.text)
    assert row["error"] == "" and row["gpu_resolved"] == "NVIDIA A30"


def test_in_the_openapi_document(app: Any) -> None:
    spec = call(app, "GET", "/openapi.json").json()
    op = spec["paths"][PATH]["post"]
    assert "text/csv" in op["requestBody"]["content"] and "text/csv" in op["responses"]["200"]["content"]
