"""The service over real sockets (slow tier): uvicorn on 127.0.0.1, 200 concurrent clients, and the page
in headless Chromium (Debian's ``chromium`` package; .ci/run installs it when it is missing).

The page is driven by a harness page served from the same origin (only by these tests' server): it loads
``/?query`` in an iframe of a given width, waits for the answer, optionally clicks "Copy link" or uploads
a CSV, and writes what the browser measured (the request sent, every table cell's data-value, label boxes
from getBBox, the page's scroll width, the downloaded CSV) as JSON into the DOM that --dump-dom prints.
Every number is compared with the API's own answer to the request the page says it sent."""
from __future__ import annotations

import asyncio
import html
import json
import os
import re
import sys
import shutil
import subprocess
import tempfile
from typing import Any, Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

pytest.importorskip("uvicorn", reason="the live service tests need the serve extra: pip install -e '.[serve]'")
httpx = pytest.importorskip("httpx", reason="the live service tests need httpx (in the test extra)")

from .helpers import REPO, SRC_PATH  # noqa: E402
from .service_helpers import free_port, start_server  # noqa: E402

pytestmark = pytest.mark.slow
LLM = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    port = free_port()
    proc = start_server(port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_200_concurrent_requests_over_loopback(base: str) -> None:
    bodies = [("/v1/predict", {"gpu": g, "llm": LLM, "workload": {"qps": q}}) for g in ("A30", "L40S", "L4")
              for q in (0.2, 1.0, 3.0)] + [("/v1/rank", {"llm": LLM, "gpus": ["A30", "L4", "H100 SXM"]})]

    async def go() -> list[Any]:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120) as c:
            return await asyncio.gather(*(c.post(p, json=b) for p, b in (bodies[i % len(bodies)] for i in range(200))))

    out = asyncio.run(go())
    assert [r.status_code for r in out] == [200] * 200, [r.text[:200] for r in out if r.status_code != 200][:3]



def test_a_valid_request_is_answered_while_300_clients_stall_their_uploads(base: str) -> None:
    """Issue 40's target: bodies still arriving hold no computing slot, so 300 stalled uploads (more than the
    256 admission slots) leave a valid request its answer within a second."""
    host, port = base.rsplit("//", 1)[1].split(":")
    body = b'{"gpu": "A30", "llm": "meta-llama/Llama-3.1-8B-Instruct"}'

    async def go() -> tuple[bytes, float]:
        writers = []
        for _ in range(300):
            _, w = await asyncio.open_connection(host, int(port))
            w.write(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body[:6]))
            writers.append(w)
        await asyncio.gather(*(w.drain() for w in writers))
        await asyncio.sleep(0.5)
        t0 = asyncio.get_running_loop().time()
        r, w = await asyncio.open_connection(host, int(port))
        w.write(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        head = await asyncio.wait_for(r.read(64), 10)
        took = asyncio.get_running_loop().time() - t0
        for x in (*writers, w):
            x.close()
        return head, took

    head, took = asyncio.run(go())
    assert head.startswith(b"HTTP/1.1 200"), head
    assert took < 1.0, took


# ---------------------------------------------------------------- the page in headless Chromium
# the page's controls (app.js's CONTROLS; a test holds the two equal): each is a key of the page's URL
CONTROLS = ["llm", "config", "dtype", "kind", "qps", "concurrency", "input_tokens", "output_tokens", "max_batch",
            "engine", "tp", "parallel", "max_nodes", "interconnect", "pp", "dp", "ep", "nodes", "replicas",
            "max_utilization", "gpus", "max_itl_ms", "max_ttft_ms", "strict", "sort", "usd_per_kwh", "usd_per_gpu_hour"]
HARNESS_JS = r"""
const P = new URLSearchParams(location.search), f = document.getElementById("f");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(cond) { for (let i = 0; i < 1200; i++) { if (cond()) return true; await sleep(50); } return false; }
f.style.width = (P.get("width") || "1200") + "px";
f.onload = async () => {
  const w = f.contentWindow, d = f.contentDocument, $ = (id) => d.getElementById(id), out = {};
  const settled = () => { const t = $("status").textContent; return t && !t.endsWith("…"); };
  if (P.get("submit")) $("run").click();
  out.settled = await until(settled);
  out.status = $("status").textContent; out.status_error = $("status").className === "error";
  out.sent = $("sent").textContent; out.search = w.location.search; out.results_hidden = $("results").hidden;
  out.controls = {};
  for (const id of CONTROLS) out.controls[id] = $(id).type === "checkbox" ? $(id).checked : $(id).value;
  const cells = (tr) => Array.from(tr.children).map((td) => [td.textContent, td.dataset.value ?? null]);
  out.rows = Array.from(d.querySelectorAll("#ranked tbody tr.c")).map(cells);
  out.more = Array.from(d.querySelectorAll("#ranked tbody tr.more")).map((tr) => ({
    launch: tr.querySelector("code.launch").textContent, launch_value: tr.querySelector("code.launch").dataset.value,
    warnings_value: tr.querySelector("ul.warn").dataset.value,
    warnings_shown: Array.from(tr.querySelectorAll("ul.warn li")).map((li) => li.textContent)}));
  out.common = $("common").textContent;
  out.excluded = Array.from(d.querySelectorAll("#excluded li")).map((li) => [li.textContent, li.dataset.kind]);
  out.hint = $("hint").hidden ? null : $("hint").textContent;
  const svg = d.querySelector("#plot svg");
  if (svg) {
    const vb = svg.viewBox.baseVal;
    out.svg = {w: vb.width, h: vb.height, dots: svg.querySelectorAll("circle").length,
               titles: Array.from(svg.querySelectorAll("circle title")).map((t) => t.textContent),
               sla: svg.querySelectorAll("line.sla").length, front: svg.querySelectorAll("polyline.front").length,
               labels: Array.from(svg.querySelectorAll("text.label, text.sla-label")).map((t) => {
                 const b = t.getBBox(); return [t.textContent, b.x, b.y, b.width, b.height]; })};
  }
  const root = d.documentElement, scroller = d.querySelector(".scroll");
  out.page_scroll = [root.scrollWidth, root.clientWidth];
  out.table_scroll = [scroller.scrollWidth, scroller.clientWidth];
  if (["pp", "dp", "ep", "nodes"].some((k) => new URLSearchParams(P.get("page").split("?")[1] || "").has(k))) {
    await until(() => { const t = $("layout-status").textContent; return t && !t.endsWith("…"); });
    out.layout_status = $("layout-status").textContent; out.layout_error = $("layout-status").className === "error";
    out.layout = Object.fromEntries(Array.from(d.querySelectorAll("#layout-out dt")).map((dt) =>
      [dt.textContent.replace(/ \(ms\)$/, ""), dt.nextElementSibling.dataset.value]));
  }
  if (P.get("copy")) {
    $("status").textContent = "";
    $("copy").click();
    await until(() => /link/i.test($("status").textContent));
    out.copy_status = $("status").textContent; out.link = $("link").hidden ? null : $("link").value;
    out.href = w.location.href;
  }
  if (P.get("csv")) {
    const dt = new w.DataTransfer();
    dt.items.add(new w.File([P.get("csv")], "rows.csv", {type: "text/csv"}));
    $("csv").files = dt.files;
    $("csv").dispatchEvent(new w.Event("change"));
    await until(() => !$("csv-download").hidden || $("csv-status").className === "error");
    out.csv_status = $("csv-status").textContent;
    out.csv_name = $("csv-download").download;
    out.csv = $("csv-download").hidden ? null : await (await w.fetch($("csv-download").href)).text();
  }
  document.getElementById("out").textContent = JSON.stringify(out);
};
f.src = P.get("page");
"""
HARNESS = f"""<!doctype html><html><body><iframe id="f" style="height:900px;border:0"></iframe>
<pre id="out"></pre><script>const CONTROLS = {json.dumps(CONTROLS)};{HARNESS_JS}</script></body></html>"""
# the test server: the real app, plus the harness page at /_harness (these tests' server only)
SERVER = """
import sys, uvicorn
from starlette.responses import HTMLResponse
from starlette.routing import Route
from wattgpu.service import create_app
app = create_app()
page = open(sys.argv[2], encoding="utf-8").read()
async def harness(request): return HTMLResponse(page)
app.router.routes.insert(0, Route("/_harness", harness))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium); .ci/run installs it")
    return exe


@pytest.fixture(scope="module")
def page_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exe = _chromium()  # skip before starting anything
    assert exe
    harness = tmp_path_factory.mktemp("harness") / "harness.html"
    harness.write_text(HARNESS, encoding="utf-8")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port), str(harness)], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": SRC_PATH}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(300):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            import time
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _drive(base: str, query: dict[str, str] | None = None, **options: str) -> dict[str, Any]:
    """What the harness saw of ``/?query`` (the worked example when ``query`` is None)."""
    page = "/" + ("?" + urlencode(query) if query is not None else "")
    url = f"{base}/_harness?" + urlencode({"page": page, **options})
    with tempfile.TemporaryDirectory() as profile:
        res = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                              "--virtual-time-budget=90000", "--window-size=1300,1000", "--dump-dom", url],
                             capture_output=True, text=True, timeout=240, env={**os.environ, "HOME": profile})
    assert res.returncode == 0, res.stderr[-2000:]
    start, end = res.stdout.find('<pre id="out">'), res.stdout.find("</pre>")
    text = html.unescape(res.stdout[start + len('<pre id="out">'):end])
    assert text, f"the harness wrote nothing (the page never settled?): {res.stdout[-3000:]}"
    out: dict[str, Any] = json.loads(text)
    assert out["settled"], out
    return out


def _api(base: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{base}/v1/rank", json=body, timeout=120)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def _num(text: str | None) -> float:
    return float(text) if text else float("nan")


def _same_as_api(out: dict[str, Any], api: dict[str, Any]) -> None:
    """Every table cell holds the API's value (data-value: JavaScript's shortest round-trip text)."""
    cands = api["candidates"]
    assert len(out["rows"]) == len(out["more"]) == len(cands), (out["status"], len(cands))
    assert out["status"] == f"{len(cands)} candidates, {len(api['excluded'])} excluded."
    for row, more, c in zip(out["rows"], out["more"], cands):
        rank, gpu, tp, replicas, power, energy, itl, itl80, ttft, cap = row
        assert gpu[0] == c["gpu"]
        assert (_num(rank[1]), _num(tp[1]), _num(replicas[1]), _num(cap[1])) == (c["rank"], c["tp"], c["replicas"],
                                                                                 c["max_batch"])
        assert _num(power[1]) == c["total_power_w"] and power[0] == f"{c['total_power_w']:.0f}"
        assert _num(energy[1]) == c["energy"]["j_per_token"]
        assert _num(itl[1]) == c["itl_s"] and itl[0] == f"{c['itl_s'] * 1e3:.1f}"
        lo, hi = c["itl_intervals"]["80"]
        assert json.loads(itl80[1]) == [lo, hi] and itl80[0] == f"{lo * 1e3:.1f}–{hi * 1e3:.1f}"
        assert (ttft[1] == "" and c["ttft_s"] is None) or _num(ttft[1]) == c["ttft_s"]
        assert json.loads(more["launch_value"]) == c["launch_args"]
        if c["launch_args"]:
            assert more["launch"].startswith("vllm serve ") and c["launch_args"][2] in more["launch"]
        # each warning is shown: under its row, or once above the table when every candidate has it
        assert json.loads(more["warnings_value"]) == c["warnings"]
        for w in c["warnings"]:
            assert (w in more["warnings_shown"]) != (w in out["common"]), w
    assert [e[0] for e in out["excluded"]] == [f"{x['gpu']}{' ×' + str(x['tp']) if x['tp'] > 1 else ''}: {x['reason']}"
                                               for x in api["excluded"]]
    assert [e[1] for e in out["excluded"]] == [x["reason_kind"] for x in api["excluded"]]


def _layouts_same_as_api(out: dict[str, Any], api: dict[str, Any]) -> None:
    """The layout ranking (parallel = auto): every row holds the API's layout, nodes, figures and launch line."""
    cands = api["candidates"]
    assert len(out["rows"]) == len(cands) and out["status"] == f"{len(cands)} candidates, {len(api['excluded'])} excluded."
    for row, more, c in zip(out["rows"], out["more"], cands):
        rank, gpu, layout, nodes, power, energy, itl, _, ttft, cap = row
        lay = c["layout"]
        assert gpu[0] == c["gpu"] and _num(rank[1]) == c["rank"] and layout[0] == c["label"] and f"TP{lay['tp']}" in layout[0]
        assert _num(nodes[1]) == c["nodes"] and _num(cap[1]) == c["batch"]
        assert _num(power[1]) == c["total_power_w"] and _num(energy[1]) == c["j_per_token"]
        assert _num(itl[1]) == c["itl_s"] and _num(ttft[1]) == c["ttft_s"]
        assert json.loads(more["launch_value"]) == c["launch_args"]


def _plot_is_legible(out: dict[str, Any], n: int) -> None:
    """Dots for every candidate; labels inside the SVG and never over each other (measured by getBBox)."""
    svg = out["svg"]
    assert svg["dots"] == n and svg["front"] == 1
    boxes = svg["labels"]
    assert any(b[0] for b in boxes), "no label placed at all"
    for name, x, y, w, h in boxes:
        assert 0 <= x and x + w <= svg["w"] and 0 <= y and y + h <= svg["h"], (name, x, y, w, h, svg["w"], svg["h"])
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            apart = a[1] + a[3] <= b[1] or b[1] + b[3] <= a[1] or a[2] + a[4] <= b[2] or b[2] + b[4] <= a[2]
            assert apart, (a, b)
    names = [t.split(": ITL ")[0] for t in svg["titles"]]  # every dot names itself in its tooltip
    assert len(names) == n and all(names)
    for label in (b[0] for b in boxes if not b[0].startswith("SLA ")):  # a label names a dot (its name, shortened)
        assert label in {re.sub(r" \(.*\)", "", name) for name in names}, label


def test_page_opens_with_the_worked_example_answered(page_base: str) -> None:
    out = _drive(page_base)
    body = {"llm": LLM, "workload": {"kind": "server", "qps": 2}, "sla": {"max_itl_ms": 50}}
    assert json.loads(out["sent"]) == body
    # the URL now holds the query, so the answer is a link
    assert dict(httpx.QueryParams(out["search"].lstrip("?"))) == {"llm": LLM, "kind": "server", "qps": "2",
                                                                 "max_itl_ms": "50"}
    api = _api(page_base, body)
    assert len(api["candidates"]) > 10
    _same_as_api(out, api)
    _plot_is_legible(out, len(api["candidates"]))
    assert out["svg"]["sla"] == 1 and any(b[0] == "SLA 50 ms" for b in out["svg"]["labels"])


INLINE_CONFIG = {"_name_or_path": "my-org/my-llama", "model_type": "llama", "hidden_size": 4096,
                 "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                 "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192}
CONTROL_CASES = [
    # every control but config and clients, each away from its default
    ({"llm": "Qwen/Qwen2.5-7B-Instruct", "dtype": "fp8", "kind": "server", "qps": "4",
      "input_tokens": "1024", "output_tokens": "128", "max_batch": "64", "engine": "tgi", "tp": "2", "replicas": "3",
      "max_utilization": "0.7", "gpus": "A30,L40S,H100 SXM", "max_itl_ms": "60", "max_ttft_ms": "900", "strict": "1",
      "sort": "cost", "usd_per_kwh": "0.12", "usd_per_gpu_hour": "2.5"},
     {"llm": "Qwen/Qwen2.5-7B-Instruct", "dtype": "fp8", "tp": 2, "replicas": 3, "max_utilization": 0.7,
      "workload": {"kind": "server", "qps": 4, "input_tokens": 1024, "output_tokens": 128,
                   "max_batch": 64, "engine": "tgi"},
      "gpus": ["A30", "L40S", "H100 SXM"], "sla": {"max_itl_ms": 60, "max_ttft_ms": 900}, "strict": True,
      "sort": "cost", "usd_per_kwh": 0.12, "usd_per_gpu_hour": 2.5}),
    # an inline config.json (used over the catalog id), TP auto, a closed loop of clients, sorted by power
    ({"llm": LLM, "config": json.dumps(INLINE_CONFIG), "dtype": "int4", "kind": "closed_loop", "concurrency": "16",
      "tp": "auto", "sort": "power", "gpus": "A30,L4,A10"},
     {"llm": INLINE_CONFIG, "dtype": "int4", "tp": "auto", "workload": {"kind": "closed_loop", "concurrency": 16},
      "sort": "power", "gpus": ["A30", "L4", "A10"]}),
    # a 70B on groups of 8, as many replicas as the load needs, sorted by ITL
    ({"llm": "meta-llama/Llama-3.1-70B-Instruct", "kind": "server", "qps": "20", "dtype": "bfloat16", "tp": "8",
      "replicas": "auto", "sort": "itl", "gpus": "H100 SXM,A100 SXM4 80GB,L4"},
     {"llm": "meta-llama/Llama-3.1-70B-Instruct", "dtype": "bfloat16", "tp": 8, "replicas": "auto", "sort": "itl",
      "workload": {"kind": "server", "qps": 20}, "gpus": ["H100 SXM", "A100 SXM4 80GB", "L4"]}),
    # the layout search: DeepSeek-R1 over up to 2 nodes of 8 with RoCE between them
    ({"llm": "deepseek-ai/DeepSeek-R1-0528", "kind": "offline", "parallel": "auto", "max_nodes": "2",
      "interconnect": "roce", "gpus": "H100 SXM,H200 SXM"},
     {"llm": "deepseek-ai/DeepSeek-R1-0528", "parallel": "auto", "max_nodes": 2, "interconnect": "roce",
      "workload": {"kind": "offline"}, "gpus": ["H100 SXM", "H200 SXM"]}),
]


@pytest.mark.parametrize("query,body", CONTROL_CASES, ids=["every-control", "inline-config-auto", "tp8-70b", "layouts"])
def test_each_control_reaches_the_request_and_the_answer_is_shown(page_base: str, query: dict[str, str],
                                                                  body: dict[str, Any]) -> None:
    out = _drive(page_base, query)
    assert not out["status_error"], out["status"]
    assert json.loads(out["sent"]) == body
    for key, value in query.items():  # the form shows the query, and the URL keeps every key of it
        shown = out["controls"].get(key)
        assert shown is None or str(shown).lower() in (value.lower(), "true" if value == "1" else value)
    assert dict(httpx.QueryParams(out["search"].lstrip("?"))) == query
    api = _api(page_base, body)
    if body.get("parallel") == "auto":
        _layouts_same_as_api(out, api)
        return
    _same_as_api(out, api)
    if api["candidates"]:
        _plot_is_legible(out, len(api["candidates"]))


def test_does_not_fit_hint_points_to_tp_auto(page_base: str) -> None:
    out = _drive(page_base, {"llm": "meta-llama/Llama-3.1-70B-Instruct", "kind": "server", "qps": "1",
                             "gpus": "B200,H100 SXM,L40S"})
    assert any(kind == "does_not_fit" for _, kind in out["excluded"]), out["excluded"]
    assert out["hint"] and "auto" in out["hint"]


def test_phone_width_copy_link_and_csv_upload(page_base: str) -> None:
    csv_text = f"llm,gpu,qps,workload\n{LLM},A30,1,server\n{LLM},A3O,,\n"
    out = _drive(page_base, None, width="375", copy="1", csv=csv_text)
    # no horizontal page scroll at 375 px: only the table scrolls, inside its own box
    assert out["page_scroll"][0] <= out["page_scroll"][1], out["page_scroll"]
    assert out["table_scroll"][1] <= 375
    _plot_is_legible(out, out["svg"]["dots"])
    assert out["svg"]["w"] <= 375
    # "Copy link" shows (and copies) a link that holds the whole query
    assert out["link"] == out["href"] and "llm=meta-llama" in out["link"] and "max_itl_ms=50" in out["link"]
    assert out["copy_status"] in ("Link copied.", "Copy the selected link.")
    # the CSV upload offers the batch CSV as a download, byte for byte the endpoint's answer
    direct = httpx.post(f"{page_base}/v1/predict/batch.csv", content=csv_text.encode(),
                        headers={"Content-Type": "text/csv"}, timeout=60)
    assert direct.status_code == 200
    assert out["csv"] == direct.text and out["csv_name"] == "rows-predictions.csv"
    assert "1 rows predicted, 1 with an error" in out["csv_status"]


@pytest.mark.parametrize("query,submit,needle", [
    ({"llm": "meta-llama/Llama-3.1-8B-Instrukt", "kind": "server", "qps": "1"}, "", "Llama-3.1-8B-Instruct"),
    ({"kind": "server", "qps": "1"}, "1", "Name an LLM"),
    ({"llm": LLM, "kind": "server", "qps": "1", "replicas": "many"}, "", "replicas"),
], ids=["typo", "empty", "bad-replicas"])
def test_errors_are_one_clear_line(page_base: str, query: dict[str, str], submit: str, needle: str) -> None:
    out = _drive(page_base, query, **({"submit": submit} if submit else {}))
    assert out["status_error"] and needle in out["status"], out["status"]
    assert out["status"].count("meta-llama/Llama-3.1-8B-Instruct,") <= 1  # the did-you-mean list once, not twice
    assert out["status"].lower().count("did you mean") <= 1
    assert out["results_hidden"]


def test_every_control_of_the_page_is_exercised() -> None:
    js = (REPO / "runtime" / "wattgpu" / "service" / "static" / "app.js").read_text()
    declared = re.search(r"const CONTROLS = (\[.*?\]);", js, re.S)
    assert declared is not None
    assert json.loads(declared.group(1)) == CONTROLS
    page = (REPO / "runtime" / "wattgpu" / "service" / "static" / "index.html").read_text()
    forms = re.findall(r'<form id="(?:query|layout)".*?</form>', page, re.S)
    assert len(forms) == 2
    ids = set(re.findall(r'<(?:input|select|textarea) id="([a-z_]+)"', "".join(forms))) - {"link"}
    assert ids == set(CONTROLS)  # no control outside the URL and the tests
    exercised = set().union(*(q.keys() for q, _ in CONTROL_CASES), LAYOUT_QUERY)
    assert exercised == set(CONTROLS)


# the layout form: DeepSeek-R1 as 2 stages of 8 H100 on 2 nodes, expert parallelism on, RoCE between the nodes
LAYOUT_QUERY = {"llm": "deepseek-ai/DeepSeek-R1-0528", "kind": "offline", "tp": "8", "gpus": "H100 SXM",
                "interconnect": "roce", "pp": "2", "dp": "1", "ep": "on", "nodes": "2"}


def test_the_layout_form_answers_as_the_api(page_base: str) -> None:
    """A link holding pp/dp/ep/nodes predicts that layout on open; every field shown is the API's value."""
    out = _drive(page_base, LAYOUT_QUERY)
    assert out.get("layout_status") and not out["layout_error"], out.get("layout_status")
    assert dict(httpx.QueryParams(out["search"].lstrip("?"))) == LAYOUT_QUERY
    body = {"llm": LAYOUT_QUERY["llm"], "gpu": "H100 SXM", "workload": {"kind": "offline", "tp": 8}, "pp": 2, "dp": 1,
            "nodes": 2, "ep": "on", "interconnect": "roce"}
    r = httpx.post(f"{page_base}/v1/predict", json=body, timeout=120)
    assert r.status_code == 200, r.text
    api = r.json()
    assert api["method"] == "anchored" and out["layout_status"] == f"{api['gpu']}: {api['label']}"
    shown = {k: json.loads(v) for k, v in out["layout"].items()}
    assert len(shown) > 5
    for name, value in shown.items():
        want: Any = api
        for part in name.split("."):
            want = want[part]
        assert value == want, name

