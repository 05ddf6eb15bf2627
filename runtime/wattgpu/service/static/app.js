// WattGPU page: builds a POST /v1/rank body from the form and shows the API's numbers as they come.
// Nothing is recomputed here: the table and the plot print fields of the response.
"use strict";
const $ = (id) => document.getElementById(id);
const FIELDS = ["llm", "kind", "qps", "concurrency", "input_tokens", "output_tokens", "max_batch",
                "max_itl_ms", "max_ttft_ms", "gpus"];

// The ranked table's columns: [field of a rank candidate (wattgpu/record.py), scale for people (s → ms), digits
// (a number: fixed decimals; "p3": 3 significant digits; absent: as given)]. Each cell's data-value holds the
// API's number unscaled; tests/test_record.py checks every field and scale against the record.
const COLUMNS = [["rank"], ["gpu"], ["tp"], ["replicas"], ["total_power_w", 1, 0], ["energy.j_per_token", 1, "p3"],
                 ["itl_s", 1e3, 1], ["ttft_s", 1e3, 0], ["max_batch"], ["launch_args"]];

function fmt(x, digits) { return x === null || x === undefined ? "∞" : Number(x).toFixed(digits); }
function field(c, name) { return name.split(".").reduce((o, k) => (o === null || o === undefined ? o : o[k]), c); }
function quote(a) { return /^[A-Za-z0-9_.\/:=,@+-]+$/.test(a) ? a : "'" + a.replace(/'/g, "'\\''") + "'"; }

function cell(tr, text, value) {
  const td = document.createElement("td");
  td.textContent = text;
  if (value !== undefined) td.dataset.value = value === null ? "" : String(value);
  tr.appendChild(td);
}

function body() {
  const out = {workload: {kind: $("kind").value}};
  const cfg = $("config").value.trim();
  if (cfg) {
    try { out.llm = JSON.parse(cfg); } catch (e) { throw new Error("config.json is not valid JSON: " + e.message); }
  } else {
    out.llm = $("llm").value.trim();
  }
  for (const f of ["input_tokens", "output_tokens", "max_batch"]) if ($(f).value) out.workload[f] = Number($(f).value);
  if (out.workload.kind === "server" && $("qps").value) out.workload.qps = Number($("qps").value);
  if (out.workload.kind === "closed_loop" && $("concurrency").value) out.workload.concurrency = Number($("concurrency").value);
  const sla = {};
  for (const f of ["max_itl_ms", "max_ttft_ms"]) if ($(f).value) sla[f] = Number($(f).value);
  if (Object.keys(sla).length) out.sla = sla;
  const gpus = $("gpus").value.split(",").map((s) => s.trim()).filter(Boolean);
  if (gpus.length) out.gpus = gpus;
  return out;
}

function plot(res) {
  const pts = res.candidates.map((c) => ({x: c.itl_s * 1e3, y: c.energy.j_per_token, gpu: c.gpu, tp: c.tp}));
  const holder = $("plot");
  holder.textContent = "";
  if (!pts.length) return;
  const W = 720, H = 360, L = 60, R = 20, T = 15, B = 45;
  const xs = pts.map((p) => p.x).concat(res.max_itl_ms ? [res.max_itl_ms] : []), ys = pts.map((p) => p.y);
  const x0 = 0, x1 = Math.max(...xs) * 1.08 || 1, y0 = 0, y1 = Math.max(...ys) * 1.08 || 1;
  const sx = (v) => L + (v - x0) / (x1 - x0) * (W - L - R), sy = (v) => H - B - (v - y0) / (y1 - y0) * (H - T - B);
  const ns = "http://www.w3.org/2000/svg";
  const el = (name, attrs, text) => {
    const e = document.createElementNS(ns, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const svg = el("svg", {viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img",
                         "aria-label": "Energy per token against ITL for each candidate GPU"});
  svg.appendChild(el("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#333"}));
  svg.appendChild(el("line", {x1: L, y1: T, x2: L, y2: H - B, stroke: "#333"}));
  for (let i = 0; i <= 5; i++) {
    const vx = x0 + (x1 - x0) * i / 5, vy = y0 + (y1 - y0) * i / 5;
    svg.appendChild(el("text", {x: sx(vx), y: H - B + 16, "text-anchor": "middle"}, vx.toFixed(1)));
    svg.appendChild(el("text", {x: L - 6, y: sy(vy) + 4, "text-anchor": "end"}, vy.toPrecision(2)));
  }
  svg.appendChild(el("text", {x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle"}, "ITL (ms per token)"));
  svg.appendChild(el("text", {x: 14, y: (T + H - B) / 2, transform: `rotate(-90 14 ${(T + H - B) / 2})`,
                              "text-anchor": "middle"}, "Energy (J per token)"));
  if (res.max_itl_ms) {
    svg.appendChild(el("line", {class: "sla", x1: sx(res.max_itl_ms), x2: sx(res.max_itl_ms), y1: T, y2: H - B}));
    svg.appendChild(el("text", {x: sx(res.max_itl_ms) + 4, y: T + 10}, `SLA ${res.max_itl_ms} ms`));
  }
  // the candidates no other candidate beats on both axes, joined left to right
  const front = pts.filter((p) => !pts.some((q) => q !== p && q.x <= p.x && q.y <= p.y && (q.x < p.x || q.y < p.y)))
                   .sort((a, b) => a.x - b.x);
  svg.appendChild(el("polyline", {class: "front", points: front.map((p) => `${sx(p.x)},${sy(p.y)}`).join(" ")}));
  for (const p of pts) {
    const on = front.includes(p);
    const c = el("circle", {class: on ? "dot" : "dot off", cx: sx(p.x), cy: sy(p.y), r: on ? 5 : 3.5});
    c.appendChild(el("title", {}, `${p.gpu}${p.tp > 1 ? " ×" + p.tp : ""}: ${p.x.toFixed(1)} ms, ${p.y.toPrecision(3)} J/token`));
    svg.appendChild(c);
    if (on) svg.appendChild(el("text", {x: sx(p.x) + 7, y: sy(p.y) - 6}, p.gpu.replace(/^NVIDIA /, "") + (p.tp > 1 ? " ×" + p.tp : "")));
  }
  holder.appendChild(svg);
}

function render(res) {
  const wl = res.workload;
  $("summary").textContent = `${res.llm}: ${wl.kind}${wl.kind === "server" ? " at " + wl.qps + " req/s" : ""}, ` +
    `${wl.input_tokens}→${wl.output_tokens} tokens — best: ${res.best || "none"}`;
  const tbody = $("ranked").querySelector("tbody");
  tbody.textContent = "";
  for (const c of res.candidates) {
    const tr = document.createElement("tr");
    for (const [name, scale, digits] of COLUMNS) {
      const v = field(c, name);
      if (name === "launch_args") cell(tr, v ? v.map(quote).join(" ") : "");
      else if (name === "gpu") cell(tr, v);
      else if (digits === "p3") cell(tr, Number(v).toPrecision(3), v);
      else if (digits !== undefined) cell(tr, fmt(v === null ? null : v * scale, digits), v);
      else cell(tr, String(v), v);
    }
    tbody.appendChild(tr);
  }
  const ex = $("excluded");
  ex.textContent = "";
  for (const x of res.excluded) {
    const li = document.createElement("li");
    li.textContent = `${x.gpu}: ${x.reason}`;
    ex.appendChild(li);
  }
  plot(res);
  $("results").hidden = false;
}

async function run(ev) {
  if (ev) ev.preventDefault();
  const status = $("status");
  status.className = "";
  let req;
  try { req = body(); } catch (e) { status.className = "error"; status.textContent = e.message; return; }
  status.textContent = "Ranking…";
  const params = new URLSearchParams();
  for (const f of FIELDS) if ($(f).value && !(f === "llm" && typeof req.llm !== "string")) params.set(f, $(f).value);
  history.replaceState(null, "", "?" + params.toString());
  const r = await fetch("/v1/rank", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(req)});
  const res = await r.json();
  if (!r.ok) {
    status.className = "error";
    const e = res.error;
    status.textContent = `${e.field}: ${e.message}` + (e.matches && e.matches.length ? ` (did you mean ${e.matches.join(", ")}?)` : "");
    $("results").hidden = true;
    return;
  }
  status.textContent = `${res.candidates.length} candidates, ${res.excluded.length} excluded.`;
  render(res);
}

async function start() {
  $("query").addEventListener("submit", run);
  const q = new URLSearchParams(location.search);
  for (const f of FIELDS) if (q.has(f)) $(f).value = q.get(f);
  if (!q.has("qps") && q.get("kind") && q.get("kind") !== "server") $("qps").value = "";
  try {
    const llms = await (await fetch("/v1/llms")).json();
    const list = $("llm-list");
    for (const m of llms) if (!m.unsupported_reason) list.appendChild(new Option(m.name));
  } catch (e) { /* the page still works by typing an id */ }
  if (q.has("run") && $("llm").value) await run();
}
start();
