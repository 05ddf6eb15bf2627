"""The output record is declared once (wattgpu/record.py): every output is derived from it or checked against it.

A field added in the declaration alone shows up in the predict JSON, the CSV, the rank candidates, the OpenAPI
schemas and the docs check; predict JSON, rank candidates and CSV carry the same scalar fields, same names, SI units.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from wattgpu import Prediction, RankEntry, rank, record
from wattgpu.predictor import Predictor
from wattgpu.record import ENERGY, PREDICTION, RANK_ONLY, Out
from wattgpu.workload import Workload

REPO = Path(__file__).resolve().parents[1]
LLM = "meta-llama/Llama-3.1-8B-Instruct"
SCALARS = ("number", "integer", "boolean", "string")


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


def _stored(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_prediction_and_rank_entry_hold_the_declared_fields() -> None:
    computed = {o.name for o in PREDICTION if o.get is not None or o.kind == "energy"}
    computed |= {o.name for o in PREDICTION if isinstance(getattr(Prediction, o.name, None), property)}
    assert _stored(Prediction) == {o.name for o in PREDICTION} - computed
    rank_stored = {o.name for o in RANK_ONLY if not isinstance(getattr(RankEntry, o.name, None), property)}
    assert _stored(RankEntry) == _stored(Prediction) | (rank_stored - {"rank"}) | {"prices"}
    for o in (*PREDICTION, *RANK_ONLY):  # every declared field can be read from an entry
        assert o.name == "rank" or o.kind == "energy" or hasattr(RankEntry, o.name) or o.name in _stored(RankEntry)


def test_units_are_si_and_names_say_them() -> None:
    suffix = {"_s": "s", "_w": "W", "_j": "J", "_tok_s": "tokens/s"}
    for o in (*PREDICTION, *RANK_ONLY):
        end = max((e for e in suffix if o.name.endswith(e)), key=len, default=None)  # the longest suffix names it
        if end is not None and o.kind not in ("object", "intervals"):
            assert o.unit == suffix[end], o
        assert o.human_unit != "ms" or (o.unit == "s" and o.scale == 1e3), o  # ms only for people


def test_predict_rank_and_csv_carry_the_same_scalar_fields(pred: Predictor, tmp_path: Path) -> None:
    from wattgpu.batch import predict_csv

    wl = Workload(kind="server", qps=1.0)
    p = pred.predict("NVIDIA L4", LLM, wl)
    d = json.loads(json.dumps(p.to_dict((0.1, None, 1.0, None))))
    assert set(d) == {o.name for o in PREDICTION}
    res = rank(LLM, wl, gpus=["NVIDIA L4"], predictor=pred, usd_per_kwh=0.1)
    c = json.loads(json.dumps(res.to_dict()))["candidates"][0]
    assert set(c) == {o.name for o in (*PREDICTION, *RANK_ONLY)}
    src = tmp_path / "in.csv"
    src.write_text(f"llm,gpu,workload,qps\n{LLM},NVIDIA L4,server,1\n")
    predict_csv(str(src), str(tmp_path / "out.csv"), prices=(0.1, None, 1.0, None), predictor=pred)
    row = next(csv.DictReader(open(tmp_path / "out.csv")))
    for o in PREDICTION:
        if o.kind not in SCALARS:
            continue
        col = f"{o.name}_resolved" if o.csv == "resolved" else o.name
        assert col in row, o.name  # every scalar of the JSON is a CSV column, same name
        assert o.name in c and type(c[o.name]) is type(d[o.name])
        if o.kind == "number" and d[o.name] is not None:
            assert float(row[col]) == d[o.name] == c[o.name], o.name  # same unit, same value
    for e in ENERGY:
        if e.csv is not None and d["energy"][e.name] is not None:
            assert float(row[e.name]) == d["energy"][e.name] == c["energy"][e.name]
    assert c["itl_intervals"] == d["itl_intervals"] and float(row["itl_80_high"]) == d["itl_intervals"]["80"][1]


def test_a_field_declared_once_appears_everywhere(pred: Predictor, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The one edit: a dummy Out in the declaration; JSON, CSV, rank, OpenAPI and the docs check all see it."""
    from wattgpu.batch import predict_csv
    from wattgpu.service.openapi import openapi_document

    dummy = Out("dummy_gpu_watts_w", "W", "a test field: twice the power", "dummy", get=lambda p: 2.0 * p.power_w)
    monkeypatch.setattr(record, "PREDICTION", (*PREDICTION, dummy))
    p = pred.predict("NVIDIA L4", LLM)
    assert p.to_dict()["dummy_gpu_watts_w"] == 2.0 * p.power_w
    c = rank(LLM, Workload(), gpus=["NVIDIA L4"], predictor=pred).to_dict()["candidates"][0]
    assert c["dummy_gpu_watts_w"] == 2.0 * c["power_w"]
    src = tmp_path / "in.csv"
    src.write_text(f"llm,gpu\n{LLM},NVIDIA L4\n")
    predict_csv(str(src), str(tmp_path / "out.csv"), predictor=pred)
    row = next(csv.DictReader(open(tmp_path / "out.csv")))
    assert float(row["dummy_gpu_watts_w"]) == 2.0 * float(row["power_w"])
    schemas = openapi_document()["components"]["schemas"]
    for name in ("Prediction", "RankCandidate", "RankEntry"):
        assert "dummy_gpu_watts_w" in schemas[name]["properties"], name
    assert record.undocumented((REPO / "docs" / "json.md").read_text()) == ["dummy_gpu_watts_w"]


def test_docs_json_md_names_every_declared_field_and_csv_column() -> None:
    assert record.undocumented((REPO / "docs" / "json.md").read_text()) == []


def test_answers_validate_against_the_generated_schemas(pred: Predictor) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from wattgpu.answers import predict_answer, rank_answer
    from wattgpu.service.openapi import openapi_document

    doc = openapi_document()
    resolver = {"components": doc["components"]}

    def check(name: str, value: Any) -> None:
        schema = {**doc["components"]["schemas"][name], **resolver}
        jsonschema.validate(json.loads(json.dumps(value)), schema)

    for wl in (Workload(), Workload(kind="server", qps=50.0), Workload(kind="closed_loop", concurrency=8)):
        check("Prediction", predict_answer(pred, "NVIDIA L4", LLM, wl))
        r = rank_answer(pred, LLM, wl, gpus=["NVIDIA L4", "NVIDIA A30"], max_itl_ms=30)
        for c in r["candidates"]:
            check("RankCandidate", c)
        for x in r["excluded"]:
            if x["prediction"] is not None:
                check("RankEntry", x["prediction"])
    with pytest.raises(jsonschema.ValidationError):  # the schema has teeth
        check("Prediction", {**predict_answer(pred, "NVIDIA L4", LLM, Workload()), "itl_s": "fast"})


def test_tables_and_the_page_read_the_declaration() -> None:
    from wattgpu.cli import rank_columns
    from wattgpu.results import TABLE_FIELDS, finish

    assert TABLE_FIELDS == record.TABLE_FIELDS and set(TABLE_FIELDS) <= {o.name for o in PREDICTION}
    for name, head, _ in rank_columns(True, True, True, True, True):
        o = record.field(name) if name != "bound" else None
        assert name == "bound" or o is not None
        if o is not None and o.human_unit == "ms":
            assert head.endswith("ms"), (name, head)  # a scaled column says the unit it is scaled to
    keys = finish(1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 8.0, False, 1.0)
    internal = {"raw_power_w", "not_finite", "server_learned"}
    assert set(keys) - internal <= set(TABLE_FIELDS)
    js = (REPO / "runtime" / "wattgpu" / "service" / "static" / "app.js").read_text()
    columns = re.search(r"const COLUMNS = (\[.*?\]);\n", js, re.S)
    assert columns is not None
    cols = json.loads(columns.group(1).replace("\n", " "))
    for col in cols:
        name, scale = col[0], (col[1] if len(col) > 1 else 1)
        o = record.field(name.split(".")[-1])
        assert math.isclose(scale, o.scale), (name, scale, o.scale)
    page = (REPO / "runtime" / "wattgpu" / "service" / "static" / "index.html").read_text()
    head = page[page.index("<table id=\"ranked\""):page.index("</thead>")]
    below = re.search(r"const BELOW = (\[.*?\]);\n", js, re.S)  # columns shown on a line under each row
    below_names = set(json.loads(below.group(1))) if below else set()
    cols = [c for c in cols if c[0] not in below_names]
    assert head.count("<th ") == len(cols)  # one header per declared column
    for (name, scale, *_), th in zip([c + [1] for c in cols], re.findall(r"<th [^>]*>([^<]*)</th>", head)):
        if record.field(name.split(".")[-1]).human_unit == "ms":
            assert th.endswith("ms"), (name, th)


def test_declarations_are_consistent() -> None:
    names = [o.name for o in (*PREDICTION, *RANK_ONLY)]
    assert len(names) == len(set(names))
    assert {e.name for e in ENERGY} == set(Prediction.energy(  # the energy object's keys are declared
        Prediction(llm="x", gpu="y", workload={"output_tokens": 2}, power_w=1.0, itl_s=1.0, system_s_per_token=1.0,
                   throughput_tok_s=1.0, energy_per_token_j=1.0, energy_per_request_j=2.0, effective_batch=1.0,
                   busy_fraction=1.0, power_method="learned")))
    with pytest.raises(ValueError, match="kind"):
        Out("x", "", "", "", kind="float")


def test_to_json_reads_each_field_as_declared(pred: Predictor) -> None:
    """to_json's one-read plan equals reading every field on its own (value_of, then the kind's conversion,
    energy priced), in record order: for stored fields, properties, computed ``get`` fields and copies."""
    p = pred.predict("H100 SXM", LLM, Workload(kind="server", qps=0.5))
    prices = (0.12, 300.0, 1.3, 2.0)

    def by_hand(obj: Any, outs: tuple[Out, ...]) -> dict[str, Any]:
        conv = {"intervals": lambda v: {f"{round(i.level * 100)}": [i.low, i.high] for i in v},
                "strings": lambda v: None if v is None else list(v), "object": lambda v: None if v is None else v}
        return {o.name: obj.energy(*prices) if o.kind == "energy" else conv.get(o.kind, lambda v: v)(record.value_of(o, obj))
                for o in outs}

    for outs in (PREDICTION, (PREDICTION[3],), (*PREDICTION[:5], Out("twice", "W", "d", "l", get=lambda q: 2 * q.power_w))):
        got = record.to_json(p, prices, outs)
        assert list(got) == [o.name for o in outs] and got == by_hand(p, outs)
    entry = rank(LLM, Workload(), gpus=["A30", "H100 SXM"]).candidates[0]
    got = record.to_json(entry, prices, record.rank_entry_fields())
    assert got == by_hand(entry, record.rank_entry_fields())
    got["workload"]["qps"] = -1.0  # an answer is a copy: editing it leaves the prediction as it was
    got["bound"]["kind"] = "edited"
    assert entry.workload.get("qps") != -1.0 and entry.bound["kind"] != "edited"


def test_object_fields_are_copied_nested_levels_included() -> None:
    src = {"summary": "s", "by_gpu": {"A30": [1.0, {"x": 2.0}]}, "n": 1}
    out = record._object(src)
    assert out == src and out is not src and out["by_gpu"] is not src["by_gpu"]
    assert out["by_gpu"]["A30"] is not src["by_gpu"]["A30"] and out["by_gpu"]["A30"][1] is not src["by_gpu"]["A30"][1]
    flat = {"a": 1.0, "b": "x"}
    assert record._object(flat) == flat and record._object(flat) is not flat and record._object(None) is None
