"""The notebook's tables on how the gap moved before the budget curve: with the budget (group budget, 20M), with size
(group scale, 5M; scale-variant) and with the training settings checked again at 10M (lr10m, warmup10m)."""

from typing import Any

from lab.groups import BUDGET_VARIANT, SCALE_VARIANTS, SCALE_WIDTHS, UNPROJECTED
from lab.protocol import TRAIN_DEFAULTS, load_results
from lab.writers.common import diff, fmt, reference_main, table, variant_change
from lab.writers.compute import costs

PAPER_BY_SIZE = {"1m": ("1.637", "1.616", "+0.021 (means)"), "5m": ("1.448", "1.452", "−0.004 (medians)")}


def budget_section() -> str:
    """The seed-0 pair (ka-1m on ψ(θ) itself) at 3M, 10M and 20M, and a confirmed variant."""
    runs, variant = {}, {}
    pool = reference_main() + load_results("budget") + load_results("confirm")
    for r in (r for r in pool if r["train"]["seed"] == 0):
        if r["name"] in (f"ka-{BUDGET_VARIANT}", f"ka-1m-{BUDGET_VARIANT}-20m"):
            variant[r["tokens"] // 1_000_000] = r
        elif r["group"] != "confirm" and r["model_overrides"] in ({}, UNPROJECTED):
            runs[(r["family"], r["tokens"] // 1_000_000)] = r
    body = [[f"{ka['tokens'] / 1e6:.1f}M", ka["group"], fmt(ka["eval_bpc"]), fmt(tf["eval_bpc"]), diff(ka, tf),
             fmt(v and v["eval_bpc"]), diff(v, tf)]
            for m in sorted({m for _, m in runs}) if (ka := runs.get(("kuramoto", m))) and
            (tf := runs.get(("transformer", m))) for v in [variant.get(m)]]
    sweep = {p: min((r["eval_bpc"] for r in load_results(g) if r["preset"] == p), default=None)
             for p, g in (("ka-1m", "lr-unprojected"), ("tf-1m", "lr"))}
    if None not in sweep.values():
        v = next((r for r in load_results("screen5") if r["name"] == f"ka-{BUDGET_VARIANT}"), None)
        body.insert(0, ["3.0M", "lr (best of each sweep, valid BPC)", fmt(sweep["ka-1m"]), fmt(sweep["tf-1m"]),
                        diff(sweep["ka-1m"], sweep["tf-1m"]), fmt(v and v["eval_bpc"]) + " (screen5)" * bool(v),
                        diff(v, sweep["tf-1m"])])
    if len(body) < 2:
        return "_No longer-budget runs yet (`python -m lab run budget`)._"
    return table(["tokens", "group", "ka-1m", "tf-1m", "gap",
                  f"ka-1m {BUDGET_VARIANT} ({variant_change(BUDGET_VARIANT)})", "its gap"], body)


def _scale_runs() -> dict[str, dict[str, Any]]:
    """Each preset's seed-0 run at 1M (main; ka-1m on ψ(θ) itself) and 5M (scale), the best rate tried."""
    runs: dict[str, dict[str, Any]] = {}
    for r in (r for r in reference_main() + load_results("scale") if r["train"]["seed"] == 0):
        if r["preset"] not in runs or r["eval_bpc"] < runs[r["preset"]]["eval_bpc"]:
            runs[r["preset"]] = r
    return runs


def scale_section() -> str:
    """The seed-0 pair at 1M and 5M parameters, test BPC, beside the paper's enwik8 numbers; then scale-variant."""
    runs = _scale_runs()
    tried = {p: ", ".join(f"{x:g}" for x in sorted(r["train"]["lr"] for r in load_results("scale") if r["preset"] == p))
             for p in ("ka-5m", "tf-5m")}
    body = [[size.upper(), ka["group"], f"{ka['params']:,} / {tf['params']:,}",
             f"{ka['train']['lr']:g} / {tf['train']['lr']:g}", " / ".join(tried.get(f"{f}-{size}", "—") or "—"
                                                                            for f in ("ka", "tf")),
             fmt(ka["eval_bpc"]), fmt(tf["eval_bpc"]), diff(ka, tf), f"{p_ka} / {p_tf}, {p_gap}",
             *(" / ".join(c) for c in zip(costs(ka), costs(tf), strict=True))]
            for size, (p_ka, p_tf, p_gap) in PAPER_BY_SIZE.items()
            if (ka := runs.get(f"ka-{size}")) and (tf := runs.get(f"tf-{size}"))]
    if len(body) < 2:
        return "_No 5M runs yet (`python -m lab run scale`)._"
    return (table(["size", "group", "params ka / tf", "lr ka / tf", "rates tried ka / tf", "ka test BPC",
                   "tf test BPC", "gap", "paper (enwik8) ka / tf, gap", "model FLOPs/token ka / tf",
                   "training FLOPs ka / tf"], body) + "\n\n" + _variants_at_5m(runs))


def _variants_at_5m(runs: dict[str, dict[str, Any]]) -> str:
    """The 1M variants on ka-5m (scale-variant) against ka-5m at the same rate, beside their Δ at 1M (seed 0)."""
    done = {r["name"]: r for r in load_results("scale-variant")}
    if not done:
        return "_The best 1M variants at 5M: not run yet (`python -m lab run scale-variant`, after `scale`)._"
    one = {r["name"]: r for g in ("confirm", "main-unprojected") for r in load_results(g)}
    body = []
    for name in (n for n in SCALE_VARIANTS if f"ka-5m-{n}" in done):
        v = done[f"ka-5m-{name}"]
        base = next((r for r in load_results("scale") if r["preset"] == "ka-5m" and r["train"]["lr"] == v["train"]["lr"]
                     and r["train"]["seed"] == v["train"]["seed"]), None)
        widths = ", ".join(f"at 5M {k}={x}" for k, x in SCALE_WIDTHS.get(name, {}).items())
        at1 = one.get(f"ka-{name}")
        body.append([name, variant_change(name) + (f"; {widths}" if widths else ""), f"{v['train']['lr']:g}",
                     fmt(v["eval_bpc"]), diff(v, base), diff(v, runs.get("tf-5m")),
                     diff(at1, one.get("ka-1m-seed0")), diff(at1, runs.get("tf-1m")), *costs(v)])
    return table(["1M variant", "change", "lr at 5M", "test BPC at 5M (seed 0)", "Δ vs ka-5m at the same rate",
                  "gap to the best tf-5m", "Δ at 1M (seed 0, vs main-unprojected)", "gap at 1M",
                  "model FLOPs/token", "training FLOPs"], body)


def tuning10m_section(group: str, option: str) -> str:
    """Each 1M model at main's and the group's setting of ``option`` (seed 0, 10M), and the gaps."""
    def value(r: dict[str, Any]) -> float:
        return r["train"].get(option, TRAIN_DEFAULTS[option])

    pool = [r for r in reference_main() + load_results(group) if r["train"]["seed"] == 0]
    rows = {p: sorted([r for r in pool if r["preset"] == p], key=value) for p in ("ka-1m", "tf-1m")}
    if not all(len({r["group"] for r in rs}) == 2 and group in {r["group"] for r in rs} for rs in rows.values()):
        return f"_Not run yet (`python -m lab run {group}`, after `main`)._"
    best = {p: min(rs, key=lambda r: r["eval_bpc"]) for p, rs in rows.items()}
    main = {p: next(r for r in rs if r["group"] != group) for p, rs in rows.items()}
    return table(["preset", "group", option, "test BPC", "the better"],
                 [[p, r["group"], f"{value(r):g}", fmt(r["eval_bpc"]), "✓" if r is best[p] else ""]
                  for p, rs in rows.items() for r in rs]) + "\n\n" + table(
        ["seed-0 gap, ka-1m − tf-1m", option, "gap"],
        [["each at its better setting", f"{value(best['ka-1m']):g} / {value(best['tf-1m']):g}",
          diff(best["ka-1m"], best["tf-1m"])],
         ["at main's settings", f"{value(main['ka-1m']):g} / {value(main['tf-1m']):g}",
          diff(main["ka-1m"], main["tf-1m"])]])
