"""Hostile input, by class rather than by example (issue 15).

- every CSV column × arbitrary/special text → a prediction or a one-line row error naming the line,
  the column and (for numbers) the accepted range; ``--on-error skip`` always carries on;
- every kind of input path (directory, FIFO, device, symlink loop, over-long name, unreadable, empty,
  binary, oversize) → ConfigFileError before anything hangs or grows;
- cross-field rules for catalog, spec files and CSV rows;
- every public API function with wrong argument types → a WattGPUError (TypeError subclass), never an
  AttributeError;
- the batch exit-status contract (0 / 1 with a summary / 2 / 3).
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wattgpu
from wattgpu import (Catalog, ConfigFileError, GpuSpec, LlmSpec, Predictor, SpecValidationError, WattGPUError,
                     Workload, default_catalog, rank)
from wattgpu.batch import KIND_COLUMNS, WORKLOAD_COLUMNS, predict_csv
from wattgpu.cli import main
from wattgpu.errors import ArgumentTypeError
from wattgpu.hfconfig import llm_from_hf_config, load_llm_file
from wattgpu.safeio import read_json_file
from wattgpu.workload import WORKLOAD_NUMBERS

LLM = "meta-llama/Llama-3.1-8B-Instruct"
GOOD = {"llm": LLM, "gpu": "NVIDIA A30"}
PRED = Predictor()
EXAMPLES = int(os.environ.get("WATTGPU_HYPOTHESIS_EXAMPLES", "300"))
SPECIAL = ["", " ", "nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e400", "-1e400", "1e-400", "-1", "0", "-0",
           "0.0", "1e30", "99999999999999999999999999", "1.5", "7.0", "abc", " 12 ", "0x10", "1_000", "1,5", "１２",
           "12abc", "--1", "+5", ".5", "5.", "e5", "1e", "None", "null", "true", "[]", "{}", "\"\"", "'", "\\",
           "\n", "a\nb", "x" * 5000, "🙂", "\u202e", "server", "offline", "closed_loop", "vllm", "tgi"]
CELL = st.one_of(st.sampled_from(SPECIAL),
                 st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40))
COLUMNS = ("llm", "gpu") + KIND_COLUMNS + WORKLOAD_COLUMNS


@contextmanager
def deadline(seconds: int):
    """Fail instead of hanging: SIGALRM after ``seconds``."""
    def on_alarm(*_):
        raise TimeoutError(f"still running after {seconds} s (a hang)")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _csv(path: Path, rows: list[dict[str, str]]) -> Path:
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    return path


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------- every CSV column
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(column=st.sampled_from(COLUMNS), text=CELL, kind=st.sampled_from(["", "server", "closed_loop", "offline"]))
def test_any_cell_gives_a_prediction_or_a_row_error_naming_the_column(tmp_path, column, text, kind):
    hostile = dict(GOOD, workload=kind, qps="0.5" if kind == "server" else "",
                   concurrency="8" if kind == "closed_loop" else "")
    hostile[column] = text
    src = _csv(tmp_path / "in.csv", [dict(GOOD, workload="", qps="", concurrency=""), hostile])
    messages: list[str] = []
    with deadline(60):
        summary = predict_csv(str(src), str(tmp_path / "out.csv"), predictor=PRED, report=messages.append)
    out = _read(tmp_path / "out.csv")
    assert summary.rows_read == 2 and len(out) == 2, "one output row per input row"
    assert out[0]["error"] == "" and float(out[0]["power_w"]) > 0, "a good row is never hurt by a bad one"
    row = out[1]
    if row["error"]:
        assert summary.skipped == 1 and summary.exit_code == 1
        (msg,) = messages
        assert msg.startswith("error: line ") and "\n" not in msg and len(msg) < 600
        assert "\n" not in row["error"]
        if column in WORKLOAD_NUMBERS and text.strip():
            assert f"column {column!r}" in msg or "column 'qps'" in msg or "column 'concurrency'" in msg, msg
            cross_field = "workload kind" in msg or "workload for" in msg or "for a closed_loop" in msg
            # TP degree vs this row's LLM heads / GPU form factor: the message says which values fit
            cross_field = cross_field or (column == "tp" and ("heads" in msg or "groups of at most" in msg
                                                              or "no link" in msg or "interconnect" in msg))
            # memory fit: the value is valid, the model does not fit this GPU with it (needs / has GB)
            cross_field = cross_field or ("does not fit" in msg and "needs" in msg and "usable" in msg)
            assert cross_field or ("[" in msg and "]" in msg) or " > " in msg or " ≥ " in msg, f"no accepted range in {msg!r}"
        elif column in ("llm", "gpu") and not text.strip():
            assert f"column {column!r} is empty" in msg
    else:
        assert summary.exit_code == 0
        for k in ("power_w", "itl_s", "throughput_tok_s", "energy_per_token_j"):
            v = float(row[k])
            assert math.isfinite(v) and v > 0, (k, row[k])
        assert float(row["power_w"]) <= PRED.resolve_gpu(row["gpu"].strip()).tdp_w + 1e-9


@pytest.mark.parametrize("column", sorted(WORKLOAD_NUMBERS))
@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e400", "-5", "0", "1e30", "abc", "1.5e", "0x10"])
def test_every_numeric_column_refuses_specials_with_line_column_and_range(tmp_path, column, text):
    row = dict(GOOD, workload="server" if column == "qps" else "closed_loop" if column == "concurrency" else "",
               **{column: text})
    src = _csv(tmp_path / "in.csv", [row])
    msgs: list[str] = []
    summary = predict_csv(str(src), str(tmp_path / "out.csv"), predictor=PRED, report=msgs.append)
    rule = WORKLOAD_NUMBERS[column]
    if rule.check("w", column, float(text)) if _finite_in(rule, text) else False:
        pytest.skip("a valid value for this column")
    assert summary.skipped == 1, msgs
    assert msgs == [f"error: line 2: column {column!r} = {text!r} is invalid; expected {rule.expected}"]


def _finite_in(rule, text: str) -> bool:
    try:
        rule.parse("w", "c", text)
        return True
    except SpecValidationError:
        return False


def test_cli_skip_exit_1_with_summary_and_stop_exit_2(tmp_path):
    rows = [GOOD, dict(GOOD, max_batch="nan"), dict(GOOD, gpu="No Such GPU"), dict(GOOD, input_tokens="1e400")]
    src, dst = _csv(tmp_path / "in.csv", rows), tmp_path / "out.csv"
    r = CliRunner().invoke(main, ["predict", "--input", str(src), "--output", str(dst)])
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines()[-1] == (
        f"wrote {dst}: rows read 4, predicted 1, skipped 3 (invalid value 2, unknown GPU or LLM 1)")
    r = CliRunner().invoke(main, ["predict", "--input", str(src), "--output", str(dst), "--on-error", "stop"])
    assert r.exit_code == 2 and r.stderr.startswith("error: line 3: column 'max_batch' = 'nan'")
    all_bad = _csv(tmp_path / "bad.csv", [dict(GOOD, gpu="x"), dict(GOOD, llm="")])
    r = CliRunner().invoke(main, ["predict", "--input", str(all_bad), "--output", str(dst)])
    assert r.exit_code == 1 and "predicted 0, skipped 2" in r.stderr
    r = CliRunner().invoke(main, ["predict", "--input", str(_csv(tmp_path / "ok.csv", [GOOD])), "--output", str(dst)])
    assert r.exit_code == 0 and "rows read 1, predicted 1, skipped 0" in r.stderr


def test_ragged_rows_and_bad_headers(tmp_path):
    dst = tmp_path / "out.csv"
    (tmp_path / "r.csv").write_text(f"llm,gpu\n{LLM},A30,extra\n{LLM}\n{LLM},A30,\n")
    s = predict_csv(str(tmp_path / "r.csv"), str(dst), predictor=PRED)
    assert (s.rows_read, s.predicted, s.skipped) == (3, 1, 2)
    errs = [r["error"] for r in _read(dst)]
    assert "3 cells but the header has 2" in errs[0] and "'gpu' is empty" in errs[1] and errs[2] == ""
    for text, needle in [("llm,gpu,gpu\n", "appears twice"), ("a,b\n1,2\n", "llm and gpu"),
                         ("\n", "llm and gpu"), (",".join(["llm", "gpu"] + [f"c{i}" for i in range(300)]), "columns"),
                         ("llm,gpu\n" + "x" * (1 << 21), "longer than"), ('llm,gpu\n"unterminated,\n' + "a" * 10, "")]:
        (tmp_path / "h.csv").write_text(text)
        try:
            predict_csv(str(tmp_path / "h.csv"), str(dst), predictor=PRED)
        except ConfigFileError as exc:
            assert needle in str(exc) and "\n" not in str(exc)


# ---------------------------------------------------------------- every kind of input path
def _path_cases(tmp: Path) -> dict[str, str]:
    (tmp / "dir").mkdir()
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    (tmp / "loop").symlink_to(tmp / "loop")
    (tmp / "empty").write_bytes(b"")
    (tmp / "binary").write_bytes(bytes(range(256)) * 40)
    (tmp / "latin1").write_bytes("llm,gpu\ncafé,A30\n".encode("latin-1"))
    unreadable = tmp / "unreadable"
    unreadable.write_text("llm,gpu\n")
    unreadable.chmod(0)
    return {"directory": str(tmp / "dir"), "fifo": str(fifo), "device": "/dev/zero", "symlink loop": str(tmp / "loop"),
            "long name": str(tmp / ("n" * 300 + ".json")), "long path": "/" + "a/" * 3000 + "x.json",
            "missing": str(tmp / "nope.json"), "unreadable": str(unreadable), "empty": str(tmp / "empty"),
            "binary": str(tmp / "binary"), "latin1": str(tmp / "latin1"), "nul in name": "a\x00b.json"}


@pytest.fixture
def hostile_paths(tmp_path):
    return _path_cases(tmp_path)


KINDS = ["directory", "fifo", "device", "symlink loop", "long name", "long path", "missing", "unreadable", "empty",
         "binary", "latin1", "nul in name"]


@pytest.mark.parametrize("kind", KINDS)
def test_csv_input_paths_are_refused_without_hanging(tmp_path, hostile_paths, kind):
    if kind == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads a mode-000 file")
    with deadline(20), pytest.raises(ConfigFileError) as exc:
        predict_csv(hostile_paths[kind], str(tmp_path / "out.csv"), predictor=PRED)
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 400
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reader", ["gpu", "llm", "json"])
def test_json_input_paths_are_refused_without_hanging(hostile_paths, kind, reader):
    if kind == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads a mode-000 file")
    path = hostile_paths[kind]
    with deadline(20), pytest.raises(WattGPUError) as exc:
        if reader == "gpu":
            PRED.resolve_gpu(Path(path) if "\x00" not in path else path)
        elif reader == "llm":
            load_llm_file(path)
        else:
            read_json_file(path, what="GPU spec")
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 400


def test_oversize_inputs_are_refused_before_reading(tmp_path, monkeypatch):
    import wattgpu.batch as batch

    big = tmp_path / "big.csv"
    big.write_text("llm,gpu\n" + f"{LLM},A30\n" * 1000)
    monkeypatch.setattr(batch, "MAX_CSV_BYTES", 1000)
    with pytest.raises(ConfigFileError, match="larger than 1,000 bytes"):
        predict_csv(str(big), str(tmp_path / "o.csv"), predictor=PRED)
    js = tmp_path / "big.json"
    js.write_text(" " * 1_000_001 + "{}")
    with pytest.raises(ConfigFileError, match="larger than"):
        PRED.resolve_gpu(str(js))


@pytest.mark.parametrize("target", ["dir", "fifo", "/dev/full", "missing_dir/o.csv"])
def test_output_paths_that_are_not_files_are_refused(tmp_path, target):
    src = _csv(tmp_path / "in.csv", [GOOD])
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    out = target if target.startswith("/") else str(tmp_path / target)
    with deadline(20), pytest.raises(ConfigFileError):
        predict_csv(str(src), out, predictor=PRED)


def test_output_is_atomic_and_may_be_the_input(tmp_path):
    src = _csv(tmp_path / "in.csv", [GOOD, dict(GOOD, gpu="nope")])
    s = predict_csv(str(src), str(src), predictor=PRED)
    assert (s.predicted, s.skipped) == (1, 1)
    assert [r["gpu"] for r in _read(src)] == ["NVIDIA A30", "nope"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".wattgpu-")], "no temp file left"


# ---------------------------------------------------------------- cross-field rules
GPU = dict(name="Test GPU", tdp_w=300, memory_size_gb=48, memory_bandwidth_gb_s=900, fp16_tflops=150,
           transistors_million=None, release_year=2022)


@pytest.mark.parametrize("change, field", [
    ({"idle_power_w": 500, "tdp_w": 100}, "idle_power_w"), ({"idle_power_w": 300}, "idle_power_w"),
    ({"base_clock_mhz": 2000, "boost_clock_mhz": 1000}, "boost_clock_mhz"), ({"memory_size_gb": 0}, "memory_size_gb"),
    ({"memory_size_gb": -1}, "memory_size_gb"), ({"tdp_w": 0}, "tdp_w")])
def test_gpu_cross_field_rules_in_api_files_and_csv(tmp_path, change, field):
    with pytest.raises(SpecValidationError) as exc:
        GpuSpec(**{**GPU, **change})
    assert exc.value.field == field
    f = tmp_path / "g.json"
    f.write_text(json.dumps({**GPU, **change}))
    with pytest.raises(SpecValidationError, match=field):
        PRED.resolve_gpu(str(f))
    src = _csv(tmp_path / "in.csv", [dict(GOOD, gpu=str(f))])
    msgs: list[str] = []
    s = predict_csv(str(src), str(tmp_path / "o.csv"), predictor=PRED, report=msgs.append)
    assert s.reasons == {"invalid value": 1} and field in msgs[0]


def test_catalog_obeys_the_cross_field_rules():
    for g in default_catalog().gpus:
        assert g.idle_power_w is None or g.idle_power_w < g.tdp_w
        assert g.base_clock_mhz is None or g.boost_clock_mhz is None or g.base_clock_mhz <= g.boost_clock_mhz
    data = json.loads(wattgpu.specs.catalog_json_bytes())
    data["gpus"][0]["spec"]["idle_power_w"] = data["gpus"][0]["spec"]["tdp_w"] + 1
    with pytest.raises(wattgpu.ArtifactError, match="idle_power_w"):
        Catalog.from_json(data)


@pytest.mark.parametrize("doc,words", [
    ({}, "the top level lacks the key 'catalog_version'"), ([], "expected a JSON object"),
    ({"catalog_version": 1, "gpus": "x", "llms": []}, "'gpus' must be a list"),
    ({"catalog_version": 1, "gpus": [1], "llms": []}, "gpus[0] must be an object with the key 'spec'"),
    ({"catalog_version": 1, "gpus": [{"spec": []}], "llms": []}, "gpus[0].spec must be an object"),
    ({"catalog_version": 1, "gpus": [], "llms": [{"spec": {}}]}, "llms[0] must be an object with the key 'name'"),
    ({"catalog_version": 1, "gpus": [], "llms": [{"name": "x"}]}, "an entry lacks the key 'spec'"),
])
def test_malformed_catalog_documents_are_named_in_words(doc, words):
    """A catalog document of the wrong shape says which part, not a Python exception's repr, and names
    the file it came from."""
    with pytest.raises(wattgpu.ArtifactError) as ei:
        Catalog.from_json(doc, source="my/specs.json")
    msg = str(ei.value)
    assert msg.startswith("my/specs.json: malformed catalog: ") and words in msg and "Error(" not in msg, msg


def test_predicted_power_never_below_idle_for_server_load():
    a30 = default_catalog().gpu("A30")
    for qps in (0.001, 0.1, 1.0):
        p = PRED.predict(a30, LLM, Workload(kind="server", qps=qps))
        assert p.idle_power_w is not None and p.idle_power_w <= p.power_w <= a30.tdp_w


# ---------------------------------------------------------------- public API: wrong argument types
BAD_ARGS = [None, "A30", 5, 1.5, True, [], {}, {"kind": "server"}, b"x", object(), math.nan, ("a",), [None]]


def _rank_result():
    return rank(LLM, gpus=["A30"])


def _api_calls(tmp: Path):
    src = _csv(tmp / "in.csv", [GOOD])
    out = str(tmp / "o.csv")
    cat = default_catalog()
    rr = _rank_result()
    p = wattgpu.predict("A30", LLM)
    from wattgpu.plot import render_svg, write_svg

    return {
        "Catalog.gpu": cat.gpu, "Catalog.llm": cat.llm, "Catalog.find_gpu": cat.find_gpu,
        "Catalog.find_llm": cat.find_llm, "Catalog.from_json": Catalog.from_json,
        "predict(llm)": lambda x: wattgpu.predict("A30", x), "predict(gpu)": lambda x: wattgpu.predict(x, LLM),
        "predict(workload)": lambda x: wattgpu.predict("A30", LLM, x), "predict_many": wattgpu.predict_many,
        "rank(llm)": rank, "rank(gpus)": lambda x: rank(LLM, gpus=x),
        "rank(workload)": lambda x: rank(LLM, x, gpus=["A30"]), "rank(sort)": lambda x: rank(LLM, gpus=["A30"], sort=x),
        "rank(max_itl_ms)": lambda x: rank(LLM, gpus=["A30"], max_itl_ms=x),
        "rank(strict)": lambda x: rank(LLM, gpus=["A30"], strict=x),
        "rank(pue)": lambda x: rank(LLM, gpus=["A30"], pue=x),
        "rank(usd_per_kwh)": lambda x: rank(LLM, gpus=["A30"], usd_per_kwh=x),
        "rank(predictor)": lambda x: rank(LLM, gpus=["A30"], predictor=x),
        "Predictor(model_dir)": Predictor, "Predictor(catalog)": lambda x: Predictor(catalog=x),
        "Predictor.predict_specs": PRED.predict_specs, "Predictor.predict_specs_safe": PRED.predict_specs_safe,
        "Predictor.predict_table": PRED.predict_table, "Predictor.resolve_gpu": PRED.resolve_gpu,
        "Predictor.resolve_llm": PRED.resolve_llm, "Predictor.feature_vectors": PRED.feature_vectors,
        "Workload(kind)": Workload, "Workload.from_dict": Workload.from_dict,
        "Workload(max_batch)": lambda x: Workload(max_batch=x), "Workload(engine)": lambda x: Workload(engine=x),
        "Workload(qps)": lambda x: Workload(kind="server", qps=x),
        "GpuSpec.from_dict": GpuSpec.from_dict, "LlmSpec.from_dict": LlmSpec.from_dict,
        "GpuSpec(name)": lambda x: GpuSpec(**{**GPU, "name": x}), "GpuSpec(tdp_w)": lambda x: GpuSpec(**{**GPU, "tdp_w": x}),
        "llm_from_hf_config": lambda x: llm_from_hf_config(x, "n"),
        "llm_from_hf_config(name)": lambda x: llm_from_hf_config(
            {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}, x),
        "load_llm_file": load_llm_file, "read_json_file": lambda x: read_json_file(x, what="x"),
        "predict_csv(in)": lambda x: predict_csv(x, out), "predict_csv(out)": lambda x: predict_csv(str(src), x),
        "predict_csv(on_error)": lambda x: predict_csv(str(src), out, on_error=x),
        "predict_csv(defaults)": lambda x: predict_csv(str(src), out, defaults=x),
        "predict_csv(prices)": lambda x: predict_csv(str(src), out, prices=x),
        "predict_csv(chunk)": lambda x: predict_csv(str(src), out, chunk=x),
        "Prediction.energy": p.energy, "Prediction.energy(pue)": lambda x: p.energy(None, None, x),
        "render_svg": render_svg, "write_svg(result)": lambda x: write_svg(x, str(tmp / "x.svg")),
        "write_svg(path)": lambda x: write_svg(rr, x),
    }


def test_every_public_function_refuses_wrong_types_cleanly(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    failures = []
    for name, fn in _api_calls(tmp_path).items():
        for arg in BAD_ARGS:
            try:
                with deadline(30):
                    fn(arg)
            except WattGPUError as exc:
                if "\n" in str(exc):
                    failures.append(f"{name}({arg!r:.30}): multi-line message")
            except TypeError as exc:  # allowed only with a clear message (not an attribute error in disguise)
                failures.append(f"{name}({arg!r:.30}): bare TypeError {exc}")
            except Exception as exc:  # noqa: BLE001 - the point of the test
                failures.append(f"{name}({arg!r:.30}): {type(exc).__name__}: {exc}")
    assert not failures, "\n".join(failures[:30])


def test_api_type_errors_are_typeerrors_too():
    with pytest.raises(TypeError, match="single string"):
        rank(LLM, gpus="A30")
    with pytest.raises(TypeError, match="gpu"):
        default_catalog().gpu(None)
    assert rank(LLM, {"kind": "server", "qps": 0.5}, gpus=["A30"]).workload.kind == "server"
