"""Human-readable Markdown for the scoreboard JSON (evaluate) and the paper reproduction."""
from __future__ import annotations

from typing import Any

from wattgpu.targets import UNITS

PUBLISHED_LABEL = "published, measured on Watt Counts — a different dataset"


def _f(x: Any, nd: int = 1, pct: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x:.{nd}f}{' %' if pct else ''}"


def _published(pub: dict[str, Any], target: str, key: str) -> str:
    parts = []
    for scen in ("offline", "server"):
        v = pub.get(target, {}).get(scen, {}).get(key)
        if v:
            r = f" (r {v['pearson_r']:.3f})" if "pearson_r" in v else ""
            parts.append(f"{scen} {v['mdape']:.1f} %{r}")
    return "; ".join(parts) if parts else "–"


def _method_table(res: dict[str, Any], target: str, pub: dict[str, Any]) -> list[str]:
    lines = [f"| split | method | MdAPE | Pearson r | Kendall τ GPU (groups) | Kendall τ LLM (groups) | rows | "
             f"{PUBLISHED_LABEL} |", "|---|---|---|---|---|---|---|---|"]
    for split in ("logo", "lolo", "loso", "cv"):
        for name, m in res.get(split, {}).items():
            if not isinstance(m, dict):
                continue
            # The paper's figures belong to its own recipe and baselines; our default has none.
            pubcell = ("–" if name == "default" or (split == "loso" and name == "paper_recipe")
                       else _published(pub, target, split if name == "paper_recipe" else name))
            lines.append(f"| {split.upper()} | {name} | {_f(m['mdape'], pct=True)} | {_f(m['pearson_r'], 3)} | "
                         f"{_f(m['kendall_tau_gpu'], 2)} ({m['kendall_groups_gpu']}) | "
                         f"{_f(m['kendall_tau_llm'], 2)} ({m['kendall_groups_llm']}) | {m['n']} | {pubcell} |")
    return lines


def tp_markdown(tp: dict[str, Any]) -> list[str]:
    """The tensor-parallel table: MdAPE on the multi-GPU rows alone, LOGO / LOLO / CV, learned vs baselines."""
    if not tp:
        return []
    out = ["## Tensor-parallel rows on their own (power per GPU, ITL per sequence)", "",
           "Models are trained on single-GPU and tensor-parallel rows together; these figures score the TP rows "
           "only (the tables above score single-GPU rows only). LOGO holds out a GPU type with all its single- "
           "and multi-GPU rows; with so few TP GPU types LOGO is reported as it comes.", "",
           "| target | rows | GPUs | TP | split | " + " | ".join(["method MdAPE"]) + " |", "|---|---|---|---|---|---|"]
    for t in ("power", "itl"):
        d = tp.get(t, {})
        if not d.get("rows"):
            continue
        for split in ("logo", "lolo", "cv"):
            if split not in d:
                continue
            cells = ", ".join(f"{k} {_f(v['mdape'], pct=True)}" for k, v in d[split].items() if isinstance(v, dict))
            out.append(f"| {t} | {d['rows']} | {len(d['gpus'])} | {'/'.join(str(x) for x in d['tp_values'])} | "
                       f"{split.upper()} | {cells} |")
    return out + [""]


def per_format_markdown(per_format: dict[str, Any], target: str, apart: dict[str, Any] | None = None) -> list[str]:
    """MdAPE per served weight format (FP8, NVFP4 ... apart from the 16-bit rows), split by whether the GPU
    multiplies in that format natively (FP8 / FP4 tensor cores) or weight-only; formats scored apart (never
    trained on) are marked, with their held-out GPUs."""
    if not per_format:
        return []
    apart = apart or {}
    apart_fmts = set(apart.get("per_format", {}))
    out = [f"### {target}: MdAPE per served weight format (native: the GPU has tensor cores for it; weight-only: "
           "dequantised to 16 bits)", ""]
    if apart_fmts:
        srcs = ", ".join(f"{k} {v}" for k, v in apart.get("rows_by_source", {}).items())
        out += [f"Formats marked *scored apart* ({', '.join(sorted(apart_fmts))}: {apart['rows']} single-GPU rows, "
                f"{srcs}) are never trained on (rule `fp8_scored_apart`): under LOGO / LOLO each held-out GPU's / "
                "LLM's rows are predicted by the default recipe chosen and fitted on every other GPU's / LLM's "
                "training rows, i.e. `--dtype fp8` applied to the 16-bit model. The other formats' rows are the "
                "pooled out-of-fold predictions of the tables above.", ""]
    out += ["| split | format | rows | default | physics | v0_2 | roofline |", "|---|---|---|---|---|---|---|"]
    for fmt, by_split in per_format.items():
        for split in ("logo", "lolo", "loso", "cv"):
            groups = by_split.get(split, {})
            n_all = next(iter(groups.get("all", {}).values()), {}).get("n")
            for grp, ms in groups.items():
                if grp != "all" and next(iter(ms.values()), {}).get("n") == n_all:
                    continue  # every row of the format is on one side: the "all" line says it
                label = fmt if grp == "all" else f"{fmt} ({grp.replace('_', '-')})"
                label += " *scored apart*" if fmt in apart_fmts else ""
                n = next(iter(ms.values()))["n"] if ms else 0
                cells = [_f(ms[k]["mdape"], pct=True) if k in ms else "–" for k in ("default", "physics", "v0_2", "roofline")]
                out.append(f"| {split.upper()} | {label} | {n} | " + " | ".join(cells) + " |")
    gpus = apart.get("per_gpu_logo", {})
    if gpus:
        out += ["", f"Scored-apart rows per held-out GPU (LOGO, default; bias = median (predicted − measured) / "
                "measured):", "", "| GPU | rows | MdAPE | bias |", "|---|---|---|---|"]
        out += [f"| {g} | {v['n']} | {_f(v['default']['mdape'], pct=True)} | {v['default']['bias_pct']:+.1f} % |"
                for g, v in gpus.items()]
    return out + [""]


def per_gpu_markdown(per_gpu: dict[str, Any]) -> list[str]:
    """Each held-out GPU's LOGO MdAPE per method (bias in brackets), best in bold."""
    out: list[str] = []
    for target, rows in per_gpu.items():
        if not rows:
            continue
        names = [k for k in next(iter(rows.values())) if k != "n"]
        out += [f"### {target}: each held-out GPU under LOGO (MdAPE, bias in brackets)", "",
                "| GPU | rows | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
        for g, v in rows.items():
            best = min(names, key=lambda k: v[k]["mdape"] if v[k]["mdape"] == v[k]["mdape"] else float("inf"))
            cells = [(f"**{_f(v[k]['mdape'], pct=True)}**" if k == best else _f(v[k]["mdape"], pct=True))
                     + f" ({v[k]['bias_pct']:+.0f})" for k in names]
            out.append(f"| {g} | {v['n']} | " + " | ".join(cells) + " |")
        out.append("")
    return out


def targets_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """Issue 21's targets with the figure reached, met or not, as measured."""
    if not rows:
        return []
    out = ["## Targets (issue 21), as measured", "", "| target | reached | met |", "|---|---|---|"]
    for t in rows:
        v = t["value"]
        shown = f"{v:.2f}" if isinstance(v, float) else str(v)
        out.append(f"| {t['target']} | {shown} | {'yes' if t['met'] else '**no**'} |")
    return out + [""]


def evaluate_markdown(r: dict[str, Any], runtime_s: float | None = None) -> str:
    d = r["data"]
    pub = r["paper_published"]
    out = ["# WattGPU accuracy on the measured data in `data/`", "",
           "Generated by `wattgpu-train evaluate --out reports/`"
           + (" (`--quick` smoke run: fewer trees and CV folds, figures not meaningful)" if r["protocol"]["quick"] else "")
           + ". Do not edit by hand.", "",
           f"Data: {d['rows']} single-GPU rows (power {d['rows_by_target']['power']}, ITL {d['rows_by_target']['itl']}), "
           f"{d['llms']} LLMs, sources {', '.join(d['sources'])}.",
           f"Power GPUs: {', '.join(d['gpus_by_target']['power'])}. ITL GPUs: {', '.join(d['gpus_by_target']['itl'])}.",
           "",
           "Splits: LOGO = leave one GPU out, LOLO = leave one LLM out, LOSO = leave one source (dataset) out, "
           "CV = grouped "
           f"{r['protocol']['cv_folds']}-fold on {r['protocol']['cv_group']}. MdAPE in physical units "
           "(W, s/token). Kendall τ: GPU ranking within (LLM, designed workload) and LLM ranking within "
           "(GPU, designed workload), groups with ≥ 2 items (count in brackets).", "",
           "**Selection:** " + r.get("selection", {}).get("method", "none") + ". "
           + r["protocol"]["model_selection_note"][:1].upper() + r["protocol"]["model_selection_note"][1:], "",
           f"The last column holds the paper's figures, **{PUBLISHED_LABEL}** (vLLM offline + Poisson "
           "server runs on 8 GPUs); they are context, not a comparison on the same rows.", ""]
    out += targets_markdown(r.get("targets", []))
    for target in ("power", "itl"):
        out += [f"## {target} ({UNITS[target]})", ""] + _method_table(r[target], target, pub) + [""]
        out += [f"### {target}: MdAPE per source (pooled models; LOSO: the source itself held out)", "",
                "| split | source | " + " | ".join(k for k in r[target]["logo"] if isinstance(r[target]["logo"][k], dict)) + " |",
                "|---|---|" + "---|" * sum(isinstance(v, dict) for v in r[target]["logo"].values())]
        for split in ("logo", "lolo", "loso"):
            for src, ms in r[target]["per_source"].get(split, {}).items():
                out.append(f"| {split.upper()} | {src} (n={next(iter(ms.values()))['n']}) | "
                           + " | ".join(_f(m["mdape"], pct=True) for m in ms.values()) + " |")
        out.append("")
        out += per_format_markdown(r[target].get("per_format", {}), target, r[target].get("scored_apart", {}))
    out += tp_markdown(r.get("tp", {}))
    out += per_gpu_markdown(r.get("per_gpu_logo", {}))
    ep = r["energy_pick"]
    out += ["## Picking the lowest-energy GPU", "", ep["definition"] + f"; {ep['rows']} rows have both targets.", "",
            "| split | method | top-1 | top-3 | groups | groups with > 3 GPUs | mean GPUs per group |",
            "|---|---|---|---|---|---|---|"]
    for split in ("logo", "lolo", "loso", "cv"):
        for name, m in ep.get(split, {}).items():
            out.append(f"| {split.upper()} | {name} | {_f(m['top1'], 2)} | {_f(m['top3'], 2)} | {m['groups']} | "
                       f"{m['groups_more_than_3']} | {_f(m['mean_items'], 2)} |")
    out += ["", "Top-3 is 1 by construction in groups with ≤ 3 GPUs.", "",
            "## Prediction intervals under LOGO (default)", "", r["intervals"]["power"]["method"] + ".", "",
            "| target | rows | 80 % coverage | 95 % coverage | median hi/lo ratio 80 % | median hi/lo ratio 95 % |",
            "|---|---|---|---|---|---|"]
    for t in ("power", "itl"):
        iv = r["intervals"][t]
        out.append(f"| {t} | {iv['n']} | {_f(iv['coverage_80'], pct=True)} (nominal 80) | "
                   f"{_f(iv['coverage_95'], pct=True)} (nominal 95) | {_f(iv['median_width_ratio_80'], 2)} | "
                   f"{_f(iv['median_width_ratio_95'], 2)} |")
    out += ["", "Per held-out GPU (target: every GPU with ≥ 20 rows within 10 points of nominal). Bias = median "
            "(predicted − measured) / measured of the held-out GPU. The intervals are one multiplicative band for "
            "every GPU, sized by the spread of errors across GPUs: a held-out GPU with a large bias is "
            "under-covered, one whose errors cluster tightly around a small bias is over-covered.",
            "", "| target | GPU | rows | bias | 80 % | 95 % | within 10 points |", "|---|---|---|---|---|---|---|"]
    for t in ("power", "itl"):
        for g, v in r["intervals"][t]["per_gpu"].items():
            ok = "–" if v["n"] < 20 else ("yes" if abs(v["coverage_80"] - 80) <= 10 and abs(v["coverage_95"] - 95) <= 10
                                          else "**no**")
            bias = v.get("median_signed_error_pct", float("nan"))
            out.append(f"| {t} | {g} | {v['n']} | {bias:+.1f} % | {_f(v['coverage_80'], pct=True)} "
                       f"| {_f(v['coverage_95'], pct=True)} "
                       f"| {ok} |")
    if "ttft" in r:
        from .ttft import markdown as ttft_markdown

        out += ttft_markdown(r["ttft"])
    sel = r.get("selection", {})
    if sel.get("chosen"):
        out += ["", "## Nested selection: candidates and how often each outer fold chose them", ""]
        for name, per_t in sel.get("candidates", {}).items():
            for t, cands in per_t.items():
                out += [f"- {name} {t}: " + "; ".join(f"[{i}] {c}" for i, c in enumerate(cands))]
        out += ["", "| target | split | chosen (candidate: folds) |", "|---|---|---|"]
        for t, by_split in sel["chosen"].items():
            for sp, by_name in by_split.items():
                for name, counts in by_name.items():
                    out.append(f"| {t} | {sp.upper()} | " + ", ".join(f"[{k}]: {v}" for k, v in counts.items()) + " |")
    if runtime_s is not None:
        out += ["", f"(wall time of this run: {runtime_s:.0f} s; not part of the JSON)"]
    return "\n".join(out) + "\n"


def paper_markdown(r: dict[str, Any], source_label: str) -> str:
    pub = r["paper_published"]
    d = r["data"]
    out = [f"# Paper reproduction on {source_label}", "",
           f"{d['rows']} rows, {d['llms']} LLMs, GPUs: {', '.join(d['gpus'])}; scenarios {d['scenarios']}.",
           "Protocol: " + "; ".join(f"{k}: {v}" for k, v in r["protocol"].items()), ""]
    for target in ("power", "itl"):
        out += [f"## {target}", "",
                f"| split | scenario | method | MdAPE | Pearson r | Kendall τ GPU | Kendall τ LLM | rows | {PUBLISHED_LABEL} |",
                "|---|---|---|---|---|---|---|---|---|"]
        for split in ("cv", "logo", "lolo"):
            for scen, ms in r[target][split].items():
                for name, m in ms.items():
                    key = split if name in ("default", "paper_recipe") else name
                    v = pub[target].get(scen, {}).get(key)
                    cell = (f"{v['mdape']:.1f} %" + (f" (r {v['pearson_r']:.3f})" if "pearson_r" in v else "")) if v else "–"
                    if name == "default":
                        cell = "–"  # the paper has no figure for our default recipe
                    out.append(f"| {split.upper()} | {scen} | {name} | {_f(m['mdape'], pct=True)} | {_f(m['pearson_r'], 3)} | "
                               f"{_f(m['kendall_tau_gpu'], 2)} | {_f(m['kendall_tau_llm'], 2)} | {m['n']} | {cell} |")
        out.append("")
    return "\n".join(out) + "\n"
