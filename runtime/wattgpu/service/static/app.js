// WattGPU page: builds a POST /v1/rank body from the form and shows the API's numbers as they come.
// Nothing is recomputed here: the table and the plot print fields of the response. The URL holds the query.
"use strict";
const $ = (id) => document.getElementById(id);
// every control, by id; each is a key of the URL's query string
const CONTROLS = ["llm", "config", "dtype", "kind", "qps", "concurrency", "input_tokens", "output_tokens", "max_batch",
                  "engine", "tp", "parallel", "max_nodes", "interconnect", "pp", "dp", "ep", "nodes", "replicas", "max_utilization", "gpus", "max_itl_ms", "max_ttft_ms", "strict", "sort",
                  "usd_per_kwh", "usd_per_gpu_hour"];
// what the page answers when opened with no query
const EXAMPLE = {llm: "meta-llama/Llama-3.1-8B-Instruct", kind: "server", qps: "2", max_itl_ms: "50"};

// The ranked table's columns: [field of a rank candidate (wattgpu/record.py), scale for people (s → ms), digits
// (a number: fixed decimals; "p3": 3 significant digits; absent: as given)]. Each cell's data-value holds the
// API's value unscaled; tests/test_record.py checks every field and scale against the record. launch_args and
// warnings go on a second row under each candidate.
const COLUMNS = [["rank"], ["gpu"], ["tp"], ["replicas"], ["total_power_w", 1, 0], ["energy.j_per_token", 1, "p3"],
                 ["itl_s", 1e3, 1], ["itl_intervals", 1e3, 1], ["ttft_s", 1e3, 0], ["max_batch"], ["launch_args"],
                 ["warnings"]];
const BELOW = ["launch_args", "warnings"];
// a layout prediction's figures shown (fields of wattgpu/record.py's LAYOUT_PREDICTION, as COLUMNS)
const LAYOUT_OUT = [["method"], ["label"], ["power_w", 1, 0], ["power_per_node_w", 1, 0], ["total_power_w", 1, 0],
                    ["itl_s", 1e3, 1], ["ttft_s", 1e3, 0], ["throughput_tok_s", 1, 0], ["energy.j_per_token", 1, "p3"],
                    ["roofline.itl_s", 1e3, 1], ["launch_args"], ["warnings"]];

function fmt(x, digits) { return x === null || x === undefined ? "∞" : Number(x).toFixed(digits); }
function field(c, name) { return name.split(".").reduce((o, k) => (o === null || o === undefined ? o : o[k]), c); }
function quote(a) { return /^[A-Za-z0-9_.\/:=,@+-]+$/.test(a) ? a : "'" + a.replace(/'/g, "'\\''") + "'"; }
function val(id) { const e = $(id); return e.type === "checkbox" ? (e.checked ? "1" : "") : e.value.trim(); }
function put(id, v) { const e = $(id); if (e.type === "checkbox") e.checked = v === "1" || v === "true"; else e.value = v; }
function short(name) { return name.replace(/^NVIDIA /, ""); }
function make(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

function cell(tr, text, value) {
  const td = make("td", {}, text);
  if (value !== undefined) td.dataset.value = value === null ? "" : typeof value === "object" ? JSON.stringify(value) : String(value);
  tr.appendChild(td);
}

// the POST /v1/rank body the form describes (only what differs from the API's defaults)
function body() {
  const num = (id) => Number(val(id));
  const out = {};
  if (val("config")) {
    try { out.llm = JSON.parse(val("config")); } catch (e) { throw new Error("config.json is not valid JSON: " + e.message); }
  } else if (val("llm")) {
    out.llm = val("llm");
  } else {
    throw new Error("Name an LLM (type to search the catalog) or paste its config.json.");
  }
  const wl = out.workload = {kind: val("kind")};
  if (wl.kind === "server" && val("qps")) wl.qps = num("qps");
  if (wl.kind === "closed_loop" && val("concurrency")) wl.concurrency = num("concurrency");
  for (const f of ["input_tokens", "output_tokens", "max_batch"]) if (val(f)) wl[f] = num(f);
  if (val("engine")) wl.engine = val("engine");
  if (val("dtype")) out.dtype = val("dtype");
  if (val("tp")) out.tp = val("tp") === "auto" ? "auto" : num("tp");
  for (const f of ["parallel", "interconnect"]) if (val(f)) out[f] = val(f);
  if (val("max_nodes")) out.max_nodes = num("max_nodes");
  const rep = val("replicas").toLowerCase();
  if (rep) out.replicas = /^\d+$/.test(rep) ? Number(rep) : rep;  // anything else: the API names the fault
  if (val("max_utilization")) out.max_utilization = num("max_utilization");
  const sla = {};
  for (const f of ["max_itl_ms", "max_ttft_ms"]) if (val(f)) sla[f] = num(f);
  if (Object.keys(sla).length) out.sla = sla;
  if (val("strict")) out.strict = true;
  if (val("sort")) out.sort = val("sort");
  for (const f of ["usd_per_kwh", "usd_per_gpu_hour"]) if (val(f)) out[f] = num(f);
  const gpus = val("gpus").split(",").map((s) => s.trim()).filter(Boolean);
  if (gpus.length) out.gpus = gpus;
  return out;
}

function writeUrl() {
  const params = new URLSearchParams();
  for (const f of CONTROLS) if (val(f)) params.set(f, val(f));
  history.replaceState(null, "", "?" + params.toString());
}

// nice axis ticks from 0 to at least max
function ticks(max) {
  const raw = max / 5, p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
  const n = Math.ceil(max / step - 1e-9), digits = Math.max(0, -Math.floor(Math.log10(step)));
  return {top: n * step, vals: Array.from({length: n + 1}, (_, i) => (i * step).toFixed(digits))};
}

function plot(res) {
  const holder = $("plot");
  holder.textContent = "";
  const pts = res.candidates.map((c) => {
    const iv = (c.itl_intervals || {})["80"];
    return {x: c.itl_s * 1e3, y: c.energy.j_per_token, lo: iv ? iv[0] * 1e3 : null, hi: iv ? iv[1] * 1e3 : null,
            name: short(c.gpu) + (c.tp > 1 ? " ×" + c.tp : ""), label: short(c.gpu).replace(/ \(.*\)$/, "") + (c.tp > 1 ? " ×" + c.tp : "")};
  }).filter((p) => isFinite(p.x) && isFinite(p.y));
  if (!pts.length) return;
  const W = Math.max(300, Math.min(900, holder.clientWidth || 760)), H = Math.round(Math.min(380, W * 0.66));
  const L = 52, R = 10, T = 12, B = 40;
  const tx = ticks(Math.max(...pts.map((p) => p.hi || p.x), res.max_itl_ms || 0) * 1.04 || 1);
  const ty = ticks(Math.max(...pts.map((p) => p.y)) * 1.06 || 1);
  const sx = (v) => L + v / tx.top * (W - L - R), sy = (v) => H - B - v / ty.top * (H - T - B);
  const ns = "http://www.w3.org/2000/svg";
  const el = (name, attrs, text) => {
    const e = document.createElementNS(ns, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const svg = el("svg", {viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img",
                         "aria-label": "Energy per token against ITL for each candidate GPU"});
  holder.appendChild(svg);  // in the page first, so labels can be measured
  svg.appendChild(el("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis"}));
  svg.appendChild(el("line", {x1: L, y1: T, x2: L, y2: H - B, class: "axis"}));
  tx.vals.forEach((v, i) => svg.appendChild(el("text", {x: sx(+v), y: H - B + 15,
    "text-anchor": i === tx.vals.length - 1 ? "end" : "middle"}, v)));
  ty.vals.forEach((v) => svg.appendChild(el("text", {x: L - 5, y: sy(+v) + 4, "text-anchor": "end"}, v)));
  svg.appendChild(el("text", {x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle"}, "ITL (ms per token)"));
  svg.appendChild(el("text", {x: 12, y: (T + H - B) / 2, transform: `rotate(-90 12 ${(T + H - B) / 2})`,
                              "text-anchor": "middle"}, "Energy (J per token)"));
  const taken = pts.map((p) => ({x: sx(p.x) - 5, y: sy(p.y) - 5, w: 10, h: 10}));  // dots: labels keep off them
  const box = (t) => { const b = t.getBBox(); return {x: b.x - 1, y: b.y - 1, w: b.width + 2, h: b.height + 2}; };
  const hit = (a, b) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
  const inside = (b) => b.x >= L + 1 && b.x + b.w <= W - 1 && b.y >= 0 && b.y + b.h <= H - B;
  if (res.max_itl_ms) {
    const x = sx(res.max_itl_ms), right = x + 70 < W - R;
    svg.appendChild(el("line", {class: "sla", x1: x, x2: x, y1: T, y2: H - B}));
    const t = el("text", {class: "sla-label", x: right ? x + 4 : x - 4, y: T + 10, "text-anchor": right ? "start" : "end"},
                 `SLA ${res.max_itl_ms} ms`);
    svg.appendChild(t);
    taken.push(box(t));
  }
  // the candidates no other candidate beats on both axes, joined left to right
  const front = pts.filter((p) => !pts.some((q) => q !== p && q.x <= p.x && q.y <= p.y && (q.x < p.x || q.y < p.y)))
                   .sort((a, b) => a.x - b.x);
  svg.appendChild(el("polyline", {class: "front", points: front.map((p) => `${sx(p.x)},${sy(p.y)}`).join(" ")}));
  for (const p of pts) {
    if (p.lo !== null) svg.appendChild(el("line", {class: "bar", x1: sx(p.lo), x2: sx(p.hi), y1: sy(p.y), y2: sy(p.y)}));
    const on = front.includes(p);
    const c = el("circle", {class: on ? "dot" : "dot off", cx: sx(p.x), cy: sy(p.y), r: on ? 5 : 3.5});
    const iv = p.lo === null ? "" : ` (80 %: ${p.lo.toFixed(1)}–${p.hi.toFixed(1)})`;
    c.appendChild(el("title", {}, `${p.name}: ITL ${p.x.toFixed(1)} ms${iv}, ${p.y.toPrecision(3)} J/token`));
    svg.appendChild(c);
  }
  // labels: the front first, then the rest; each takes the first free spot around its dot inside the plot,
  // or none (its dot's tooltip still names it)
  for (const p of front.concat(pts.filter((q) => !front.includes(q)))) {
    const t = el("text", {class: "label"}, p.label);
    svg.appendChild(t);
    const px = sx(p.x), py = sy(p.y), w = t.getBBox().width;
    const spot = [[7, -5], [7, 13], [-7 - w, -5], [-7 - w, 13], [-w / 2, -9], [-w / 2, 19]].find(([dx, dy]) => {
      t.setAttribute("x", px + dx);
      t.setAttribute("y", py + dy);
      const b = box(t);
      return inside(b) && !taken.some((o) => hit(b, o));
    });
    if (spot) taken.push(box(t)); else t.remove();
  }
}

function render(res, req) {
  if (res.method) res = {...res, candidates: res.candidates.map((c) => ({...c, tp: c.label, replicas: c.nodes,
    energy: {j_per_token: c.j_per_token}, max_batch: c.batch}))};
  const wl = res.workload;
  const load = wl.kind === "server" ? ` at ${wl.qps} req/s` : wl.kind === "closed_loop" ? ` with ${wl.concurrency} clients` : "";
  $("summary").textContent = `${res.llm}: ${wl.kind}${load}, ${wl.input_tokens}→${wl.output_tokens} tokens — ` +
    `best: ${res.best || "none"}`;
  const tbody = $("ranked").querySelector("tbody");
  tbody.textContent = "";
  // a warning every candidate has is said once, above the table
  const cs = res.candidates, common = cs.length > 1 ? (cs[0].warnings || []).filter((w) => cs.every((c) => (c.warnings || []).includes(w))) : [];
  $("common").textContent = common.length ? "Every candidate: " + common.join("; ") + "." : "";
  for (const c of res.candidates) {
    const tr = make("tr", {class: "c"});
    for (const [name, scale, digits] of COLUMNS) {
      if (BELOW.includes(name)) continue;
      const v = field(c, name);
      if (name === "gpu") cell(tr, v);
      else if (name === "itl_intervals") {
        const iv = (v || {})["80"];
        cell(tr, iv ? `${fmt(iv[0] * scale, digits)}–${fmt(iv[1] * scale, digits)}` : "–", iv || null);
      } else if (digits === "p3") cell(tr, Number(v).toPrecision(3), v);
      else if (digits !== undefined) cell(tr, fmt(v === null ? null : v * scale, digits), v);
      else cell(tr, String(v), v);
    }
    tbody.appendChild(tr);
    const more = make("tr", {class: "more"}), td = make("td", {colspan: COLUMNS.length - BELOW.length}), box = make("div");
    const launch = make("code", {class: "launch"}, c.launch_args ? c.launch_args.map(quote).join(" ") : "no launch line (not vLLM)");
    launch.dataset.value = JSON.stringify(c.launch_args);
    box.appendChild(launch);
    const warn = make("ul", {class: "warn"});
    warn.dataset.value = JSON.stringify(c.warnings || []);
    for (const w of c.warnings || []) if (!common.includes(w)) warn.appendChild(make("li", {}, w));
    box.appendChild(warn);
    td.appendChild(box);
    more.appendChild(td);
    tbody.appendChild(more);
  }
  const ex = $("excluded");
  ex.textContent = "";
  for (const x of res.excluded) {
    const li = make("li", {"data-kind": x.reason_kind}, `${x.gpu}${x.tp > 1 ? " ×" + x.tp : ""}: ${x.reason}`);
    ex.appendChild(li);
  }
  const fits = res.excluded.some((x) => x.reason_kind === "does_not_fit") && req.tp !== "auto";
  $("hint").hidden = !fits;
  $("hint").textContent = fits ? "A GPU that cannot hold the model alone may hold it as a group: set GPUs per group to auto." : "";
  $("results").hidden = false;
  plot(res);
}

async function run(ev) {
  if (ev) ev.preventDefault();
  const status = $("status");
  status.className = "";
  writeUrl();
  let req;
  try { req = body(); } catch (e) { status.className = "error"; status.textContent = e.message; return; }
  status.textContent = "Ranking…";
  $("sent").textContent = JSON.stringify(req, null, 1);
  $("curl").textContent = `curl -s ${location.origin}/v1/rank -H 'Content-Type: application/json' -d ` +
    quote(JSON.stringify(req));
  let r, res;
  try {
    r = await fetch("/v1/rank", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(req)});
    res = await r.json();
  } catch (e) { status.className = "error"; status.textContent = "The server did not answer: " + e.message; return; }
  if (!r.ok) {
    const e = res.error || {field: "", message: "HTTP " + r.status};
    const more = e.matches && e.matches.length && !e.message.includes(e.matches[0]) ? ` (did you mean ${e.matches.join(", ")}?)` : "";
    status.className = "error";
    status.textContent = `${e.field}: ${e.message}${more}`;
    $("results").hidden = true;
    return;
  }
  status.textContent = `${res.candidates.length} candidates, ${res.excluded.length} excluded.`;
  render(res, req);
}

// POST /v1/predict for one layout: the rank form's LLM, workload, link and group, the first GPU, pp/dp/ep/nodes
async function predictLayout(ev) {
  ev.preventDefault();
  writeUrl();
  const st = $("layout-status"), out = $("layout-out");
  st.className = "";
  out.textContent = "";
  let req;
  try { req = body(); } catch (e) { st.className = "error"; st.textContent = e.message; return; }
  const one = {llm: req.llm, gpu: (req.gpus || ["H100 SXM"])[0], workload: {...req.workload, tp: +req.tp || 1}};
  if (req.dtype) one.dtype = req.dtype;
  for (const f of ["pp", "dp", "nodes"]) if (val(f)) one[f] = Number(val(f));
  for (const f of ["ep", "interconnect"]) if (val(f)) one[f] = val(f);
  st.textContent = "Predicting…";
  const r = await fetch("/v1/predict", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(one)});
  const p = await r.json();
  if (!r.ok) { st.className = "error"; st.textContent = `${p.error.field}: ${p.error.message}`; return; }
  st.textContent = `${p.gpu}: ${p.label}`;
  for (const [name, scale, digits] of LAYOUT_OUT) {
    const v = field(p, name), dd = make("dd", {}, name === "warnings" ? v.join("; ") : Array.isArray(v) ? v.map(quote).join(" ") :
      digits === "p3" ? Number(v).toPrecision(3) : digits !== undefined ? fmt(v * scale, digits) : String(v));
    dd.dataset.value = JSON.stringify(v);
    out.append(make("dt", {}, name + (scale === 1e3 ? " (ms)" : "")), dd);
  }
}

async function copyLink() {
  writeUrl();
  const link = $("link");
  link.value = location.href;
  link.hidden = false;
  link.select();
  let done = false;
  try { await navigator.clipboard.writeText(location.href); done = true; } catch (e) { done = document.execCommand("copy"); }
  $("status").className = "";
  $("status").textContent = done ? "Link copied." : "Copy the selected link.";
}

async function upload() {
  const f = $("csv").files[0], st = $("csv-status"), a = $("csv-download");
  a.hidden = true;
  st.className = "";
  if (!f) return;
  if (f.size > 1 << 20) {
    st.className = "error";
    st.textContent = `${f.name} is ${(f.size / 1048576).toFixed(1)} MiB; the limit is 1 MiB (about 10,000 rows): split it.`;
    return;
  }
  st.textContent = `Predicting ${f.name}…`;
  try {
    const r = await fetch("/v1/predict/batch.csv", {method: "POST", headers: {"Content-Type": "text/csv"}, body: f});
    if (!r.ok) throw new Error((await r.json()).error.message);
    const text = await r.text();
    if (a.href) URL.revokeObjectURL(a.href);
    a.href = URL.createObjectURL(new Blob([text], {type: "text/csv"}));
    a.download = f.name.replace(/\.csv$/i, "") + "-predictions.csv";
    st.textContent = `${f.name}: ${r.headers.get("X-Rows-Predicted")} rows predicted, ` +
      `${r.headers.get("X-Rows-Failed")} with an error (its error column says why).`;
    a.hidden = false;
  } catch (e) { st.className = "error"; st.textContent = `${f.name}: ${e.message}`; }
}

async function loadLlms() {
  try {
    const list = $("llm-list");
    for (const m of await (await fetch("/v1/llms")).json()) if (!m.unsupported_reason) list.appendChild(new Option(m.name));
  } catch (e) { /* the page still works by typing an id */ }
}

function start() {
  $("query").addEventListener("submit", run);
  $("copy").addEventListener("click", copyLink);
  $("csv").addEventListener("change", upload);
  $("layout").addEventListener("submit", predictLayout);
  const q = new URLSearchParams(location.search);
  const src = CONTROLS.some((f) => q.has(f)) ? q : new URLSearchParams(EXAMPLE);
  for (const f of CONTROLS) if (src.has(f)) put(f, src.get(f));
  loadLlms();
  if (val("llm") || val("config")) run();
  if (["pp", "dp", "ep", "nodes"].some((f) => q.has(f))) predictLayout(new Event("submit"));  // a layout link
}
start();
