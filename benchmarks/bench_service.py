#!/usr/bin/env python3
"""Load benchmark of the HTTP service (issue 34): uvicorn on 127.0.0.1 only, traffic only to loopback.

    python benchmarks/bench_service.py [--quick] [--rss-requests 100000] [--report reports/benchmarks.md]

Starts ``wattgpu serve`` (one uvicorn worker) on a free loopback port and measures, with a small
asyncio HTTP/1.1 keep-alive client written here (light, so the client takes little of the CPU the
server needs):

1. 200 concurrent requests on 200 connections (predict and rank mixed): every one must be a 200;
2. predict and rank throughput (requests/s) and latency p50/p99 at a fixed number of connections;
3. the server's RSS over ``--rss-requests`` predict requests (sampled as it goes): flat means the last
   samples are within a few MB of the first ones after warm-up.

Every loop is bounded and stops by itself. The machine's load average, the CPU count and the CPU time
the server and the client each used are reported beside the figures. With ``--report`` the figures
replace the service section of that markdown file (the rest of the file is kept).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LLM = "meta-llama/Llama-3.1-8B-Instruct"
START, END = "<!-- bench_service:start -->", "<!-- bench_service:end -->"
GPUS = ("A30", "L40S", "H100 SXM", "L4", "A100 SXM4 80GB")
LLMS = (LLM, "Qwen/Qwen2.5-7B-Instruct")
# offline and closed-loop rows take the runtime's single-row path (about 0.1-1 ms of CPU); a server row
# (Poisson arrivals) also solves Little's law on the one-row path (about 0.3-0.5 ms of CPU on this machine)
PREDICT_BODIES = [{"gpu": g, "llm": m, "workload": w} for g in GPUS for m in LLMS
                  for w in ({"kind": "offline"}, {"kind": "offline", "input_tokens": 2048, "output_tokens": 128},
                            {"kind": "closed_loop", "concurrency": 8}, {"kind": "closed_loop", "concurrency": 32})]
SERVER_BODIES = [{"gpu": g, "llm": m, "workload": {"qps": q}} for g in GPUS for m in LLMS for q in (0.5, 2.0)]
RANK_BODIES = [{"llm": LLM, "workload": {"qps": 1.0}}, {"llm": "Qwen/Qwen2.5-7B-Instruct", "sla": {"max_itl_ms": 40}}]


def request_bytes(path: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, req: bytes) -> tuple[int, bytes]:
    writer.write(req)
    status = int((await reader.readline()).split()[1])
    length = 0
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def connection(port: int, reqs: list[bytes], lat: list[float], errors: list[str], check_every: int = 0) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for k, req in enumerate(reqs):
            t = time.perf_counter()
            status, body = await one(reader, writer, req)
            lat.append(time.perf_counter() - t)
            if status != 200:
                errors.append(f"{status}: {body[:200]!r}")
            elif check_every and k % check_every == 0:
                json.loads(body)  # a well-formed answer, not just a status
    finally:
        writer.close()


def run_load(port: int, path: str, bodies: list[dict[str, Any]], n: int, conns: int) -> dict[str, Any]:
    """``n`` requests over ``conns`` keep-alive connections; requests/s and latency percentiles."""
    reqs = [request_bytes(path, bodies[i % len(bodies)]) for i in range(n)]
    lat: list[float] = []
    errors: list[str] = []

    async def go() -> float:
        t = time.perf_counter()
        await asyncio.gather(*(connection(port, reqs[c::conns], lat, errors, 50) for c in range(conns)))
        return time.perf_counter() - t

    wall = asyncio.run(go())
    lat.sort()
    return {"requests": n, "connections": conns, "errors": len(errors), "first_errors": errors[:3],
            "wall_s": wall, "requests_per_s": n / wall, "p50_ms": 1e3 * lat[len(lat) // 2],
            "p99_ms": 1e3 * lat[min(len(lat) - 1, int(len(lat) * 0.99))], "max_ms": 1e3 * lat[-1]}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int, workers: int = 1) -> subprocess.Popen[bytes]:
    env = {**os.environ}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "runtime")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    proc = subprocess.Popen([sys.executable, "-m", "wattgpu.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--workers", str(workers)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return wait_listening(proc, port, "wattgpu serve", 60)


def wait_listening(proc: subprocess.Popen[bytes], port: int, what: str, timeout_s: float) -> subprocess.Popen[bytes]:
    """``proc`` once something accepts connections on loopback ``port``; exit with its stderr if it dies first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{what} did not listen within {timeout_s:g} s")


def concurrent_burst(port: int, n: int = 200) -> dict[str, Any]:
    """``n`` requests at once, each on its own connection (predict and rank mixed)."""
    bodies = [("/v1/rank", RANK_BODIES[0]) if i % 10 == 0 else ("/v1/predict", PREDICT_BODIES[i % len(PREDICT_BODIES)])
              for i in range(n)]
    lat: list[float] = []
    errors: list[str] = []

    async def go() -> float:
        t = time.perf_counter()
        await asyncio.gather(*(connection(port, [request_bytes(p, b)], lat, errors, 1) for p, b in bodies))
        return time.perf_counter() - t

    wall = asyncio.run(go())
    return {"requests": n, "errors": len(errors), "first_errors": errors[:3], "wall_s": wall,
            "max_ms": 1e3 * max(lat)}


def rss_loop(port: int, pid: int, total: int, samples: int = 20) -> dict[str, Any]:
    """``total`` predict requests in ``samples`` chunks; the server's RSS after each chunk."""
    chunk = max(1, total // samples)
    points, errors, done = [], 0, 0
    while done < total:
        n = min(chunk, total - done)
        r = run_load(port, "/v1/predict", PREDICT_BODIES, n, 8)
        errors += r["errors"]
        done += n
        points.append((done, round(rss_mb(pid), 1)))
    first = points[min(1, len(points) - 1)][1]  # after the first chunk: warm caches, loaded sessions
    return {"requests": total, "errors": errors, "rss_mb": points, "rss_after_warmup_mb": first,
            "rss_end_mb": points[-1][1], "rss_growth_mb": round(points[-1][1] - first, 1),
            "rss_max_mb": max(p[1] for p in points)}


def measure(quick: bool, rss_requests: int) -> dict[str, Any]:
    port = free_port()
    load_before = os.getloadavg()
    proc = start_server(port)
    try:
        run_load(port, "/v1/predict", PREDICT_BODIES, 200, 4)  # warm-up: sessions, catalog, caches
        run_load(port, "/v1/rank", RANK_BODIES, 4, 2)
        cpu0, client0 = cpu_s(proc.pid), time.process_time()
        out: dict[str, Any] = {"burst_200": concurrent_burst(port)}
        out["predict"] = run_load(port, "/v1/predict", PREDICT_BODIES, 300 if quick else 20_000, 16)
        out["predict_server"] = run_load(port, "/v1/predict", SERVER_BODIES, 20 if quick else 400, 8)
        out["rank"] = run_load(port, "/v1/rank", RANK_BODIES, 10 if quick else 300, 4)
        out["cpu_s"] = {"server": cpu_s(proc.pid) - cpu0, "client": time.process_time() - client0}
        out["rss"] = rss_loop(port, proc.pid, 400 if quick else rss_requests)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    import onnxruntime
    import starlette
    import uvicorn

    out["machine"] = {"cpus": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                      "python": platform.python_version(), "uvicorn": uvicorn.__version__,
                      "starlette": starlette.__version__, "onnxruntime": onnxruntime.__version__,
                      "nice": os.nice(0), "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    return out


def markdown(r: dict[str, Any]) -> str:
    m, p, k, b, s = r["machine"], r["predict"], r["rank"], r["burst_200"], r["rss"]
    q = r["predict_server"]
    met = "met" if p["requests_per_s"] >= 500 else "missed"
    met_server = "met" if q["requests_per_s"] >= 500 else "missed"  # issue 37: every workload kind
    met_rank = "met" if k["requests_per_s"] >= 100 else "missed"
    flat = "flat" if abs(s["rss_growth_mb"]) <= 5 else "NOT flat"
    return "\n".join([
        START,
        "## Issue 34: the HTTP service under load (`python benchmarks/bench_service.py`)",
        "",
        f"One uvicorn worker (`wattgpu serve`) on 127.0.0.1, client on the same {m['cpus']}-CPU machine "
        f"(Python {m['python']}, uvicorn {m['uvicorn']}, Starlette {m['starlette']}, onnxruntime {m['onnxruntime']}; "
        f"niceness {m['nice']}). Load average before the run {m['loadavg_before'][0]:.2f} (1 min) / "
        f"{m['loadavg_before'][1]:.2f} (5 min), after it {m['loadavg_after'][0]:.2f} / {m['loadavg_after'][1]:.2f}: "
        "the machine is shared with other sessions, so the figures are what this run got, not a quiet-machine best. "
        f"Run {m['date_utc']} UTC.",
        "",
        "| figure | value | target |",
        "|---|---|---|",
        f"| 200 concurrent requests (200 connections, predict + rank) | {b['requests'] - b['errors']}/200 answered 200 "
        f"in {b['wall_s']:.2f} s | no error |",
        f"| predict throughput ({p['connections']} keep-alive connections, {p['requests']:,} requests) | "
        f"**{p['requests_per_s']:.0f} requests/s** | ≥ 500 on 2 cores: {met} |",
        f"| predict latency p50 / p99 | {p['p50_ms']:.1f} / {p['p99_ms']:.1f} ms | |",
        f"| predict throughput, server workloads ({q['connections']} connections, {q['requests']} requests) | "
        f"{q['requests_per_s']:.0f} requests/s | ≥ 500 on 2 cores: {met_server} |",
        f"| predict latency p50 / p99, server workloads | {q['p50_ms']:.0f} / {q['p99_ms']:.0f} ms | |",
        f"| rank throughput (whole catalog, {k['connections']} connections, {k['requests']} requests) | "
        f"{k['requests_per_s']:.1f} requests/s | ≥ 100 on 2 cores: {met_rank} |",
        f"| rank latency p50 / p99 | {k['p50_ms']:.0f} / {k['p99_ms']:.0f} ms | |",
        f"| server RSS over {s['requests']:,} predict requests | {s['rss_after_warmup_mb']:.1f} MB after warm-up → "
        f"{s['rss_end_mb']:.1f} MB at the end (max {s['rss_max_mb']:.1f}; growth {s['rss_growth_mb']:+.1f} MB) | "
        f"flat: {flat} |",
        f"| errors in the throughput and RSS loops | {p['errors'] + q['errors'] + k['errors'] + s['errors']} | 0 |",
        f"| CPU time during burst + throughput | server {r['cpu_s']['server']:.1f} s, client {r['cpu_s']['client']:.1f} s | |",
        "",
        "The client is a minimal asyncio HTTP/1.1 keep-alive client in the script (a general-purpose client such "
        "as httpx would take a large share of the two cores itself). The predict throughput cycles over 40 "
        "offline and closed-loop (GPU, LLM, workload) bodies, which the runtime answers on its single-row path; "
        "server-workload bodies (Poisson arrivals) are measured apart because each also solves Little's law "
        "(the one-row solve, `server_prediction_p50_us` of benchmarks/bench_runtime.py; a repeated body reads "
        "its solved state from the row memo, `server_prediction_unmemoised_p50_us` is the first solve). "
        "Every body is repeated, so after the first pass each is answered with its capacity (and a server "
        "body's solved state) memoised, and from its 32nd request an offline or closed-loop body's load path "
        "runs compiled (wattgpu.trace): the figures are those of a service answering recurring questions. "
        "The RSS loop uses the offline/closed-loop bodies. Rank bodies rank the whole catalog. Raw figures: "
        "`reports/bench_service.json`.",
        END,
    ])


def write_report(path: Path, text: str, start: str = START, end: str = END) -> None:
    """Replace the section between ``start`` and ``end`` markers of ``path``, or add it after the title: before
    the first heading or the first other script's section, so one script's section never lands inside another's
    (a later rewrite of that one would drop it)."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if start in old and end in old:
        new = old[:old.index(start)] + text + old[old.index(end) + len(end):]
    else:
        cuts = [i for i in (old.find("\n## "), old.find("\n<!-- ")) if i >= 0]
        at = min(cuts) if cuts else len(old)
        head, rest = old[:at], old[at:].lstrip("\n")
        new = head.rstrip("\n") + "\n\n" + text + "\n\n" + rest
    path.write_text(new, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few hundred requests (for tests)")
    ap.add_argument("--rss-requests", type=int, default=100_000, help="predict requests of the RSS loop")
    ap.add_argument("--out", default=None, help="write the raw figures as JSON here")
    ap.add_argument("--report", default=None, help="replace the service section of this markdown file")
    args = ap.parse_args(argv)
    r = measure(args.quick, args.rss_requests)
    text = markdown(r)
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps(r, indent=2) + "\n", encoding="utf-8")
    if args.report:
        write_report(Path(args.report), text)
    bad = sum(r[k]["errors"] for k in ("burst_200", "predict", "predict_server", "rank", "rss"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
