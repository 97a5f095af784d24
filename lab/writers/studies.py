"""The studies' files (results/dynamics.json, gap*.json, probe.json, induction.json) as tables, and the numbers the
templates' sentences about them quote: the studies write data only, their pages are rendered here."""

from typing import Any

from kuramoto_attention.diagnostics.measure import OFFSETS
from lab import select
from lab.groups import BUDGETS
from lab.protocol import PROTOCOL
from lab.studies.gap import RECALL_NAMES, RECALL_ORDER
from lab.writers.common import signed, table

GAP_GROUP = "budget40"  # the 40M-token gap study's group: results/gap-budget40.json
DIFFICULTY_NAMES = ("easiest quarter", "second", "third", "hardest quarter")
CLAIMS = {"local_near_one": "1: local \\|G\\| ≥ 0.9 at every layer",  # the paper's claims, as dynamics.py judges them
          "global_falls": "1: global order falls from the first layer to the last",
          "omega_decreasing": "2: median \\|ω\\| strictly decreasing with depth"}
# per-layer columns of the dynamics rows: header -> (key, format, what a missing layer shows)
DYNAMICS = {"local order \\|G\\| per layer": ("local_order", ".3g", "∞"),
            "global order (embedding → last)": ("global_order", ".3g", "∞"),
            "self weight A_tt per layer": ("self_weight", ".3g", "∞"),
            "median \\|ω\\| per layer": ("median_abs_omega", ".3g", "∞"),
            "timescale 2π/\\|ω\\| (tokens)": ("timescale_tokens", ".3g", "∞"),
            "ω slower than the context": ("slow_fraction", ".0%", "—")}
KNOCKOUT = {"without attention step": ("knockout_attn_bpc", "+.3f", "—"),
            "without feed-forward step": ("knockout_ff_bpc", "+.3f", "—"),
            "attention on the bound": ("attn_saturation", ".0%", "—"),
            "feed-forward on the bound": ("ff_saturation", ".0%", "—"),
            "attention drive": ("attn_drive", ".1f", "—"), "feed-forward drive": ("ff_drive", ".1f", "—")}
SYNC = {"local order \\|G\\|": ("local_order", ".2f", "—"),
        "global order (embedding → last)": ("global_order", ".2f", "—"),
        "timescale 2π/\\|ω\\| (tokens)": ("timescale_tokens", ".2f", "—"),
        "ω slower than the context": ("slow_fraction", ".0%", "—"),
        "attention on the bound": ("attn_saturation", ".0%", "—")}


def not_measured(action: str) -> str:
    return f"_Not measured yet: `python -m lab {action}`._"


def itself(r: dict[str, Any], key: str = "ff_proj") -> str:
    """"*" for a Kuramoto model whose feed-forward read ψ(θ) itself (recorded as "none", or before it was recorded)."""
    return "*" if r.get("family", "kuramoto") == "kuramoto" and r.get(key) in (None, "none") else ""


def layer_cells(r: dict[str, Any], columns: dict[str, tuple[str, str, str]]) -> list[str]:
    """A dynamics row's per-layer values, first layer to last, one cell per column ("—" where not measured)."""
    return [" → ".join(none if v is None else format(v, spec) for v in values) if (values := r.get(key)) else "—"
            for key, spec, none in columns.values()]


def dynamics_tables() -> dict[str, str]:
    """`python -m lab dynamics`'s rows: their order parameters and rates, where their heads look, each step's worth."""
    if not (rows := select.study_file("dynamics.json")):
        return dict.fromkeys(("dynamics", "dynamics_offsets", "dynamics_knockout"), not_measured("dynamics"))
    main = [[r["run"] + itself(r), *layer_cells(r, DYNAMICS), *("yes" if r[k] else "no" for k in CLAIMS),
             f"{r['omega_depth_spearman']:+.2f}"] for r in rows]
    offsets = [[r["run"], " \\| ".join(" ".join(map(str, layer)) for layer in r["peak_offset"]),
                " \\| ".join(" ".join(f"{x:.2f}" for x in layer) for layer in select.head_means(r["offset_profile"])),
                f"{sum(p >= 2 for layer in r['peak_offset'] for p in layer)} of "
                f"{sum(len(layer) for layer in r['peak_offset'])}"] for r in rows if "peak_offset" in r]
    return {"dynamics": table(["run", *DYNAMICS, "local ≥ 0.9", "global falls", "ω decreasing", "Spearman(ω, depth)"],
                              main),
            "dynamics_offsets": table(["run", "peak offset of each head, per layer",
                                       "mean A at Δ = 0, 1, 2, 3, per layer", "heads peaking at Δ ≥ 2"], offsets),
            "dynamics_knockout": table(["run", *KNOCKOUT], [[r["run"], *layer_cells(r, KNOCKOUT)] for r in rows
                                                            if "knockout_attn_bpc" in r])}


def sync_table(rows: list[dict[str, Any]]) -> str:
    """Dynamics rows side by side on synchronisation, timescales and the bound, layer by layer."""
    return table(["run", *SYNC], [[r["run"], *layer_cells(r, SYNC)] for r in rows])


def breakdown(res: dict[str, Any], labels: dict[str, str], gaps: dict[str, str]) -> str:
    """A gap study's bits per byte of each model (``labels``) and each Kuramoto model's gap to tf (``gaps``): pooled
    and by position in the window, by the transformer's loss on the byte, and by whether copying predicts it."""
    cols = [*labels.values(), *gaps.values()]

    def cells(r: dict[str, Any]) -> list[str]:
        return [*(f"{r[m]:.3f}" for m in labels), *(f"{r[f'{m}_gap']:+.3f}" for m in gaps)]

    pooled = {**res, **{f"{m}_gap": res[m] - res["tf"] for m in gaps}}
    parts = [table(["position t in the window", *cols], [["all, pooled", *cells(pooled)], *(
        [str(r["from"]) if r["to"] - r["from"] == 1 else f"{r['from']}–{r['to'] - 1}", *cells(r)]
        for r in res["by_position"])]),
        table(["bytes by the transformer's loss", "bytes", *cols],
              [[DIFFICULTY_NAMES[r["quartile"]], f"{r['bytes']:,}", *cells(r)] for r in res["by_difficulty"]])]
    if "by_recall" in res:  # absent from results measured before it existed
        parts.append(table([f"the byte's {RECALL_ORDER}-byte context", "bytes", *cols],
                           [[RECALL_NAMES[r["recall"]], f"{r['bytes']:,}", *cells(r)] for r in res["by_recall"]]))
    return "\n\n".join(parts)


def gap_tables() -> dict[str, str]:
    """`python -m lab gap`'s two studies as tables: main's seeds (with its variant) and the budget group's seed 0."""
    out = {"gap_main": not_measured("gap"), "gap_budget": not_measured(f"gap {GAP_GROUP}")}
    if res := select.study_file("gap.json"):
        variant = {"variant": "variant"} if res.get("variant_name") else {}
        out["gap_main"] = breakdown(res, {"ka": "ka" + itself(res, "ka_ff_proj"), **variant, "tf": "tf"},
                                    {"ka": "gap", **({"variant": "variant gap"} if variant else {})})
    if res := select.study_file(f"gap-{GAP_GROUP}.json"):
        labels = {k: res["runs"][k].rsplit("-", 1)[0] for k in ("lead", "tuned", "su2", "ka", "tf") if k in res["runs"]}
        out["gap_budget"] = breakdown(res, labels, {m: f"{labels[m]} gap" for m in labels if m != "tf"})
    return out


def probe_tables() -> str:
    """`python -m lab probe`: each run's held-out accuracy on the byte j back from every state along depth; then, per
    earlier byte, its accuracy at the run's last state and at its best."""
    if not (res := select.study_file("probe.json")):
        return not_measured("probe")
    depth, rows = max(r["depth"] for r in res["runs"]), []
    for r in res["runs"]:
        rows += [[f"{r['group']}/{r['name']}{itself(r)}", "current (j = 0)" if j == 0 else f"j = {j}",
                  *(f"{a:.3f}" for a in accs), *["—"] * (depth + 1 - len(accs))]
                 for j, accs in zip(res["offsets"], r["accuracy"], strict=True)]

    def last_and_best(accs: list[float]) -> str:
        top = max(range(len(accs)), key=accs.__getitem__)
        return f"{accs[-1]:.3f} ({accs[top]:.3f} {'the embedding' if top == 0 else f'after block {top}'})"

    earlier = [(i, j) for i, j in enumerate(res["offsets"]) if j > 0]
    return table(["run", "byte", "embedding", *(f"after block {i}" for i in range(1, depth + 1))], rows) + "\n\n" + \
        table(["run", *(f"byte j = {j} back: last state (best)" for _, j in earlier)],
              [[f"{r['group']}/{r['name']}{itself(r)}", *(last_and_best(r["accuracy"][i]) for i, _ in earlier)]
               for r in res["runs"]])


def notebook_slots() -> dict[str, Any]:
    """The notebook template's slots on the studies: their tables, and the numbers its sentences quote ("—" where a
    study is not measured yet)."""
    group, rows = select.judged()
    gap, budget = select.study_file("gap.json") or {}, select.study_file(f"gap-{GAP_GROUP}.json") or {}
    task = (select.study_file("induction.json") or {}).get("task", {})
    probe = select.study_file("probe.json") or {}
    dynamics = select.study_file("dynamics.json") or []
    return {
        **dynamics_tables(), **gap_tables(), "probe": probe_tables(), "induction": induction_table(full=True),
        "dynamics_groups": " ".join(dict.fromkeys(r["group"] for r in dynamics)) or "—", "dynamics_judged": group,
        "dynamics_runs": len(rows) or "—",
        **{f"dynamics_{k}": sum(r[k] for r in rows) if rows else "—" for k in CLAIMS},
        "offsets": OFFSETS,
        # the share of ka-1m-tuned's oscillators slower than once per context at initialisation (RoPE's rates)
        "rope_slow": f"{select.slow_at_start('ka-1m-tuned', PROTOCOL['context']):.0%}",
        "gap_seeds": ", ".join(map(str, gap.get("seeds", []))) or "—",
        "gap_windows": gap.get("windows_per_seed", "—"), "gap_context": gap.get("context", "—"),
        "gap_variant": gap.get("variant_name") or "—", "recall_order": RECALL_ORDER,
        "gap_budget_tokens": f"{max((budget.get('tokens') or {'': BUDGETS[-1]}).values()) / 1e6:.0f}",
        "gap_budget_windows": budget.get("windows", "—"), "gap_budget_context": budget.get("context", "—"),
        **{f"probe_{k}": probe.get(k, "—") for k in ("windows", "context", "ridge")},
        "probe_first": max(probe.get("offsets", [0])) if probe else "—",
        **{f"induction_{k}": task.get(k, "—") for k in ("segment", "alphabet", "eval_sequences", "batch")},
        "induction_seeds": ", ".join(map(str, task.get("seeds", []))) or "—",
        "induction_lr": f"{task['lr']:g}" if task else "—",
        "induction_copied": task["segment"] // 2 if task else "—",
        "induction_chance": f"{1 / task['alphabet']:.3f}" if task else "—",
    }


def cells(res: dict[str, Any], key: str) -> list[str]:
    """A model's pooled gap, its gap near the window's start and at its end, and on the bytes copying predicts."""
    return [signed(res[key] - res["tf"]), *(signed((x or {}).get(f"{key}_gap")) for x in select.gap_points(res))]


def bins(res: dict[str, Any]) -> tuple[str, str]:
    """The position bins ``cells`` reads: near the window's start, and the farthest."""
    return tuple(f"{b['from']}–{b['to'] - 1}" if b else "—" for b in select.gap_points(res)[:2])


def gap_table() -> str:
    """One row per model of each study: pooled, by position, copying, easiest and hardest quarters."""
    rows, near, far = [], "—", "—"
    if g := select.study_file("gap.json"):
        q = {r["quartile"]: r for r in g["by_difficulty"]}
        rows.append([f"{g['group']} (seeds {', '.join(map(str, g['seeds']))})", "ka-1m" + (
            " (ψ(θ) itself)" if g.get("ka_ff_proj") in (None, "none") else ""), *cells(g, "ka"),
            signed(q[0]["ka_gap"]), signed(q[3]["ka_gap"])])
    if res := select.study_file(f"gap-{GAP_GROUP}.json"):
        near, far = bins(res)
        rows += [[f"{GAP_GROUP} ({max(res['tokens'].values()) / 1e6:.0f}M tokens)",
                  res["runs"][key].rsplit("-", 1)[0], *cells(res, key), "—", "—"]
                 for key in ("tuned", "su2", "ka") if key in res.get("runs", {})]
    if not rows:
        return "_Not measured yet (`python -m lab gap`, `python -m lab gap budget40`: they need trained runs)._"
    return table(["study", "model", "pooled gap", f"positions {near}", f"positions {far}", "copying predicts the byte",
                  "easiest quarter", "hardest quarter"], rows)


def induction_table(full: bool = False) -> str:
    """`python -m lab induction`: each model's copy accuracy, mean over the seeds, after the last evaluation (``full``:
    with its parameters, after every evaluation but the first), and the first step it reached 0.5."""
    if not (res := select.study_file("induction.json")):
        return not_measured("induction")
    task, curves, params = res["task"], select.mean_curves(res), {r["model"]: r["params"] for r in res["runs"]}
    shown = [step for step, _ in next(iter(curves.values()))[1 if full else -1:]]
    return table([f"copy task model ({len(task['seeds'])} seeds, chance {1 / task['alphabet']:.3f})",
                  *(["parameters", *(f"step {s:,}" for s in shown)] if full else [f"accuracy after {task['steps']:,} "
                                                                                 "steps"]), "first step at 0.5"],
                 [[m, *([f"{params[m]:,}"] if full else []), *(f"{a:.3f}" for s, a in curve if s in shown),
                   next((f"{step:,}" for step, acc in curve if acc >= 0.5), "—")] for m, curve in curves.items()])


def dynamics_section() -> str:
    """The paper's dynamics claims on the first group measured (runs satisfying each, of all), then the loss gaps."""
    group, rows = select.judged()
    if not rows:
        return gap_table()
    group += " (ψ(θ) itself)" if any(r.get("ff_proj") is None for r in rows) else ""
    return table(["paper claim", f"runs of {group} where it holds"],
                 [[claim, f"{sum(r[key] for r in rows)} of {len(rows)}"] for key, claim in CLAIMS.items()]) + \
        "\n\n" + gap_table()
