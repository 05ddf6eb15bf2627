"""Hand-made SVG of a ranking: energy per token (log y) against ITL (x), the SLA as a vertical line.

No plotting library: plain SVG text with a few ids/classes tests can find (``point``, ``label``,
``sla``, ``best``, axes ``x-axis``/``y-axis``).
"""
from __future__ import annotations

import math
from typing import Any, Sequence
from html import escape as _html_escape

from .ranking import RankEntry, RankResult

W, H = 860, 560
LEFT, RIGHT, TOP, BOTTOM = 80, 230, 56, 64  # plot margins (right margin holds labels beyond the last point)
FONT = "font-family='DejaVu Sans, Arial, sans-serif'"


def escape(text: str) -> str:
    """XML-escape text for SVG (html.escape: no urllib/ssl import chain, unlike xml.sax.saxutils)."""
    return _html_escape(text, quote=True)


def _short(name: str) -> str:
    return name[len("NVIDIA "):] if name.startswith("NVIDIA ") else name


def _nice_step(span: float, target: int = 6) -> float:
    raw = span / max(target, 1)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _log_ticks(lo: float, hi: float) -> list[float]:
    ticks = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10 ** e
            if lo <= v <= hi:
                ticks.append(v)
    return ticks


def render_svg(result: RankResult, include_sla_misses: bool = True) -> str:
    """SVG text: one dot per candidate (the best ringed), SLA misses in grey, the SLA as a dashed line."""
    if not isinstance(result, RankResult):
        from .errors import ArgumentTypeError

        raise ArgumentTypeError(f"result: expected a wattgpu.RankResult, got {type(result).__name__}")
    pts: list[tuple[RankEntry, str]] = [(c, "candidate") for c in result.candidates]
    if include_sla_misses:
        pts += [(e.entry, "misses") for e in result.excluded if e.entry is not None]
    xs = [p.itl_s * 1e3 for p, _ in pts] + ([result.max_itl_ms] if result.max_itl_ms else [])
    ys = [p.j_per_token for p, _ in pts]
    if not pts:
        xs, ys = [1.0, 100.0], [0.1, 10.0]
    x_lo, x_hi = 0.0, max(xs) * 1.08
    y_lo, y_hi = min(ys) / 1.4, max(ys) * 1.4
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def sx(v: float) -> float:
        return LEFT + (v - x_lo) / (x_hi - x_lo) * pw

    def sy(v: float) -> float:
        return TOP + ph - (math.log10(v) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)) * ph

    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{H}' viewBox='0 0 {W} {H}' {FONT}>",
           f"<rect width='{W}' height='{H}' fill='white'/>"]
    wl = result.workload
    load = f"{wl.qps:g} req/s" if wl.kind == "server" else wl.kind
    title = f"{result.llm}: energy per token vs ITL ({load}, {wl.input_tokens}→{wl.output_tokens} tokens)"
    out.append(f"<text id='title' x='{W / 2:.0f}' y='26' font-size='15' text-anchor='middle' font-weight='bold'>"
               f"{escape(title)}</text>")
    # axes
    out.append(f"<g id='x-axis' font-size='11'><line x1='{LEFT}' y1='{TOP + ph}' x2='{LEFT + pw}' y2='{TOP + ph}' stroke='black'/>")
    step = _nice_step(x_hi - x_lo)
    v = 0.0
    while v <= x_hi + 1e-9:
        x = sx(v)
        out.append(f"<line class='tick' x1='{x:.1f}' y1='{TOP + ph}' x2='{x:.1f}' y2='{TOP + ph + 5}' stroke='black'/>"
                   f"<line x1='{x:.1f}' y1='{TOP}' x2='{x:.1f}' y2='{TOP + ph}' stroke='#eee'/>"
                   f"<text x='{x:.1f}' y='{TOP + ph + 18}' text-anchor='middle'>{v:g}</text>")
        v += step
    out.append(f"<text x='{LEFT + pw / 2:.0f}' y='{H - 18}' text-anchor='middle' font-size='13'>"
               "inter-token latency per sequence (ms)</text></g>")
    out.append(f"<g id='y-axis' font-size='11'><line x1='{LEFT}' y1='{TOP}' x2='{LEFT}' y2='{TOP + ph}' stroke='black'/>")
    for t in _log_ticks(y_lo, y_hi):
        y = sy(t)
        out.append(f"<line class='tick' x1='{LEFT - 5}' y1='{y:.1f}' x2='{LEFT}' y2='{y:.1f}' stroke='black'/>"
                   f"<line x1='{LEFT}' y1='{y:.1f}' x2='{LEFT + pw}' y2='{y:.1f}' stroke='#eee'/>"
                   f"<text x='{LEFT - 8}' y='{y + 4:.1f}' text-anchor='end'>{t:g}</text>")
    out.append(f"<text transform='translate(20 {TOP + ph / 2:.0f}) rotate(-90)' text-anchor='middle' font-size='13'>"
               "energy per generated token (J, log scale)</text></g>")
    # SLA
    if result.max_itl_ms:
        x = sx(result.max_itl_ms)
        basis = " (interval upper bound)" if result.strict else ""
        out.append(f"<g id='sla'><line x1='{x:.1f}' y1='{TOP}' x2='{x:.1f}' y2='{TOP + ph}' stroke='#c0392b' "
                   f"stroke-width='1.5' stroke-dasharray='6 4'/><text x='{x + 4:.1f}' y='{TOP + 12}' fill='#c0392b' "
                   f"font-size='11'>SLA {result.max_itl_ms:g} ms{basis}</text></g>")
    # points, then labels placed greedily to avoid overlaps
    best = result.best
    placed: list[tuple[float, float, float, float]] = []
    labels = []
    for p, kind in sorted(pts, key=lambda t: t[0].j_per_token):
        x, y = sx(p.itl_s * 1e3), sy(p.j_per_token)
        colour = "#2471a3" if kind == "candidate" else "#999999"
        out.append(f"<circle class='point {kind}' data-gpu='{escape(p.gpu)}' cx='{x:.1f}' cy='{y:.1f}' r='4' "
                   f"fill='{colour}'/>")
        is_best = best is not None and p is best and kind == "candidate"
        text = _short(p.gpu) + (f" ×{p.tp}" if p.tp > 1 else "") + (" ★ best" if is_best else "")
        w, h = 6.2 * len(text), 12.0
        lx, ly = x + 7, y + 4
        for dy in [0, -12, 12, -24, 24, -36, 36, -48, 48]:
            box = (lx, ly + dy - h + 2, lx + w, ly + dy + 2)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                ly += dy
                break
        else:
            continue  # no free slot nearby: leave the dot unlabelled rather than overprint
        placed.append((lx, ly - h + 2, lx + w, ly + 2))
        weight = " font-weight='bold'" if is_best else ""
        labels.append(f"<text class='label' x='{lx:.1f}' y='{ly:.1f}' font-size='10' fill='{colour}'{weight}>"
                      f"{escape(text)}</text>")
        if is_best:
            out.append(f"<circle id='best' cx='{x:.1f}' cy='{y:.1f}' r='9' fill='none' stroke='#1e8449' "
                       "stroke-width='2'/>")
    out.extend(labels)
    out.append(f"<text x='{LEFT + pw + 10}' y='{H - 40}' font-size='10' fill='#555'>blue: candidates; grey: miss the SLA</text>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def check_svg_path(path: Any) -> None:
    """Refuse an output path that cannot be the SVG: empty, not a path, or named other than ``.svg`` (an
    SVG written under ``plot.png`` opens as a broken image)."""
    import os

    from .errors import ConfigFileError
    from .safeio import check_output_folder, check_path_type

    check_path_type(path, "SVG output file")
    name = os.fspath(path)
    if not str(name).strip():
        raise ConfigFileError(repr(str(name)), "is a blank path; name the SVG file to write, e.g. plot.svg")
    if not str(name).lower().endswith(".svg"):
        raise ConfigFileError(str(name), "the plot is an SVG image; give the file a .svg name")
    check_output_folder(name, "SVG plot")


def write_svg(result: RankResult, path: str) -> None:
    """Write :func:`render_svg` to ``path`` (a ``.svg`` file path; an existing FIFO, device or directory
    is refused)."""
    import os
    import stat

    from .errors import ArgumentTypeError, ConfigFileError

    if not isinstance(result, RankResult):
        raise ArgumentTypeError(f"result: expected a wattgpu.RankResult, got {type(result).__name__}")
    check_svg_path(path)
    try:
        mode: int | None = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except (OSError, ValueError) as exc:
        raise ConfigFileError(repr(path)[:80], f"is not a usable output path ({exc.__class__.__name__})") from None
    if mode is not None and not stat.S_ISREG(mode):
        raise ConfigFileError(str(path), "exists and is not a regular file (directory, FIFO or device); "
                                         "choose another output path")
    with open(path, "w", encoding="utf-8") as f:
        f.write(render_svg(result))


__all__: Sequence[str] = ("render_svg", "write_svg")
