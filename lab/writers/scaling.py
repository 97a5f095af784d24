"""How the gap moved with the budget (budget), with size (scale, main-5m) and with the 10M settings (lr10m...)."""

from lab import groups, select
from lab.groups import BUDGET_VARIANT, EQUAL_FLOPS_5M, flops_per_token
from lab.protocol import PROTOCOL, TRAIN_DEFAULTS, load_results
from lab.select import SIZE_GROUP, SIZE_PAIR, Run, best, bpcs, equal_flops_run, mean, median, size_runs
from lab.writers import common
from lab.writers.common import costs, diff, fmt, lr, table, variant_change

PAPER_BY_SIZE = {"1m": ("1.637", "1.616", "+0.021 (means)"), "5m": ("1.448", "1.452", "−0.004 (medians)")}
(KA, TF), SWEEP_GROUP, MAIN_GROUP = SIZE_PAIR, "lr-5m-tuned", SIZE_GROUP  # the tuned recipe at 5M


def budget_section() -> str:
    """The seed-0 pair (ka-1m on ψ(θ) itself) at 3M, 10M and 20M, and a confirmed variant."""
    runs, variant = select.pair_by_budget()
    body = [[f"{ka['tokens'] / 1e6:.1f}M", ka["group"], fmt(ka["eval_bpc"]), fmt(tf["eval_bpc"]), diff(ka, tf),
             fmt(v and v["eval_bpc"]), diff(v, tf)]
            for m in sorted({m for _, m in runs}) if (ka := runs.get(("kuramoto", m))) and
            (tf := runs.get(("transformer", m))) for v in [variant.get(m)]]
    ka, tf = (best(r for r in load_results(g) if r["preset"] == p) for p, g in (("ka-1m", "lr-unprojected"),
                                                                                 ("tf-1m", "lr")))
    if ka and tf:
        v = next((r for r in load_results("screen5") if r["name"] == f"ka-{BUDGET_VARIANT}"), None)
        body.insert(0, ["3.0M", "lr (best of each sweep, valid BPC)", fmt(ka["eval_bpc"]), fmt(tf["eval_bpc"]),
                        diff(ka, tf), fmt(v and v["eval_bpc"]) + " (screen5)" * bool(v), diff(v, tf)])
    if len(body) < 2:
        return "_No longer-budget runs yet (`python -m lab run budget`)._"
    return table(["tokens", "group", "ka-1m", "tf-1m", "gap",
                  f"ka-1m {BUDGET_VARIANT} ({variant_change(BUDGET_VARIANT)})", "its gap"], body)


def scale_section() -> str:
    """The seed-0 pair at 1M and 5M parameters (the best rate tried), beside the paper's; then scale-variant."""
    runs = select.by_size()
    tried = {p: ", ".join(f"{x:g}" for x in sorted(r["train"]["lr"] for r in load_results("scale") if r["preset"] == p))
             for p in ("ka-5m", "tf-5m")}
    body = [[size.upper(), ka["group"], f"{ka['params']:,} / {tf['params']:,}", f"{lr(ka)} / {lr(tf)}",
             " / ".join(tried.get(f"{f}-{size}", "—") or "—" for f in ("ka", "tf")), fmt(ka["eval_bpc"]),
             fmt(tf["eval_bpc"]), diff(ka, tf), f"{p_ka} / {p_tf}, {p_gap}",
             *(" / ".join(c) for c in zip(costs(ka), costs(tf), strict=True))]
            for size, (p_ka, p_tf, p_gap) in PAPER_BY_SIZE.items()
            if (ka := runs.get(f"ka-{size}")) and (tf := runs.get(f"tf-{size}"))]
    if len(body) < 2:
        return "_No 5M runs yet (`python -m lab run scale`)._"
    return (table(["size", "group", "params ka / tf", "lr ka / tf", "rates tried ka / tf", "ka test BPC",
                   "tf test BPC", "gap", "paper (enwik8) ka / tf, gap", "model FLOPs/token ka / tf",
                   "training FLOPs ka / tf"], body) + "\n\n" + _variants_at_5m(runs))


def _variants_at_5m(runs: dict[str, Run]) -> str:
    """The 1M variants on ka-5m (scale-variant) against ka-5m at the same rate, beside their Δ at 1M (seed 0)."""
    done = {r["name"]: r for r in load_results("scale-variant")}
    if not done:
        return "_The best 1M variants at 5M: not run yet (`python -m lab run scale-variant`, after `scale`)._"
    one = {r["name"]: r for g in ("confirm", "main-unprojected") for r in load_results(g)}
    body = []
    for name in (n for n in groups.SCALE_VARIANTS if f"ka-5m-{n}" in done):
        v, at1 = done[f"ka-5m-{name}"], one.get(f"ka-{name}")
        base = select.same_rate(v, "scale", "ka-5m")
        widths = ", ".join(f"at 5M {k}={x}" for k, x in groups.SCALE_WIDTHS.get(name, {}).items())
        body.append([name, variant_change(name) + (f"; {widths}" if widths else ""), lr(v), fmt(v["eval_bpc"]),
                     diff(v, base), diff(v, runs.get("tf-5m")), diff(at1, one.get("ka-1m-seed0")),
                     diff(at1, runs.get("tf-1m")), *costs(v)])
    return table(["1M variant", "change", "lr at 5M", "test BPC at 5M (seed 0)", "Δ vs ka-5m at the same rate",
                  "gap to the best tf-5m", "Δ at 1M (seed 0, vs main-unprojected)", "gap at 1M",
                  "model FLOPs/token", "training FLOPs"], body)


def tuning10m_section(group: str, option: str) -> str:
    """Each 1M model at main's and the group's setting of ``option`` (seed 0, 10M), and the gaps."""
    def value(r: Run) -> float:
        return r["train"].get(option, TRAIN_DEFAULTS[option])

    if (rows := select.at_both_settings(group, option)) is None:
        return f"_Not run yet (`python -m lab run {group}`, after `main`)._"
    top = {p: best(rs) for p, rs in rows.items()}
    pick = {"each at its better setting": top,
            "at main's settings": {p: next(r for r in rs if r["group"] != group) for p, rs in rows.items()}}
    return table(["preset", "group", option, "test BPC", "the better"],
                 [[p, r["group"], f"{value(r):g}", fmt(r["eval_bpc"]), "✓" * (r is top[p])]
                  for p, rs in rows.items() for r in rs]) + "\n\n" + table(
        ["seed-0 gap, ka-1m − tf-1m", option, "gap"],
        [[what, f"{value(by['ka-1m']):g} / {value(by['tf-1m']):g}", diff(by["ka-1m"], by["tf-1m"])]
         for what, by in pick.items()])


def size_section() -> str:
    """The tuned recipe at 5M: its sweep, the seeds, the gaps and the equal-FLOP run."""
    by = size_runs()
    ka, tf = bpcs(by[KA]), bpcs(by[TF])
    untuned, eq = groups.best_result("ka-5m", "scale"), equal_flops_run()
    seed0 = next((r for r in by[KA] if r["train"]["seed"] == 0), None)
    tokens = groups.flop_matched_tokens(KA, TF, PROTOCOL["tokens"])
    seeds = common.seeds_table([(p, MAIN_GROUP, rs) for p, rs in by.items()], mean(tf), TF)
    rows = [["gap of the means", diff(mean(ka), mean(tf))], ["gap of the medians", diff(median(ka), median(tf))],
            ["ka-5m (scale, its best rate, seed 0): lr, test BPC",
             f"{lr(untuned)}, {fmt(untuned['eval_bpc'])}" if untuned else "—"],
            [f"{KA} seed 0 − ka-5m", diff(seed0, untuned)],
            [f"{KA}'s model FLOPs per token / {TF}'s", f"{flops_per_token(KA) / flops_per_token(TF):.2f}×"],
            [f"tokens at {TF}'s {PROTOCOL['tokens'] / 1e6:g}M-token training FLOPs", f"{tokens / 1e6:.2f}M"],
            [f"{EQUAL_FLOPS_5M} (seed 0) test BPC", fmt(eq["eval_bpc"]) if eq else
             f"not run yet: `python -m lab run {MAIN_GROUP} --only {EQUAL_FLOPS_5M}`"],
            [f"its gap to {TF}'s mean", diff(eq, mean(tf))]]
    unrun = [f"_{common.not_run(MAIN_GROUP)}._"] if not ka and not tf else []
    return "\n\n".join([common.sweep_section(SWEEP_GROUP, KA), seeds, *unrun, table(["", "value"], rows)])
