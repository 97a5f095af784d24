"""RESULTS.md's sections on how the gap moves: with the token budget, with model size, and with the
training settings each model was tuned at (learning rate, warmup) checked again at the protocol's budget."""

from typing import Any

from lab.groups import BUDGET_VARIANT, SCALE_VARIANTS, SCALE_WIDTHS, UNPROJECTED, with_twins
from lab.protocol import PROTOCOL, SWEEP, TRAIN_DEFAULTS, load_results
from lab.writers.common import fmt, reference_main, table, variant_change


def budget_section() -> str:
    """The seed-0 pair's test gap at 10M (main) and 20M tokens (budget), and the best valid gap of the 3M sweep;
    beside it a confirmed variant (``BUDGET_VARIANT``) at 10M (confirm) and 20M (budget). ka-1m reads ψ(θ) itself
    throughout (its 10M runs: main-unprojected), as every run of budget does."""
    runs, variant = {}, {}
    pool = reference_main() + load_results("budget") + load_results("confirm")
    for r in (r for r in pool if r["train"]["seed"] == 0):
        millions = r["tokens"] // 1_000_000
        if r["name"] in (f"ka-{BUDGET_VARIANT}", f"ka-1m-{BUDGET_VARIANT}-20m"):
            variant[millions] = r
        elif r["group"] != "confirm" and r["model_overrides"] in ({}, UNPROJECTED):
            runs[(r["family"], millions)] = r
    body = []
    for millions in sorted({m for _, m in runs}):
        ka, tf = runs.get(("kuramoto", millions)), runs.get(("transformer", millions))
        if ka and tf:
            v = variant.get(millions)
            body.append([f"{ka['tokens'] / 1e6:.1f}M", ka["group"], fmt(ka["eval_bpc"]), fmt(tf["eval_bpc"]),
                         f"{ka['eval_bpc'] - tf['eval_bpc']:+.4f}", fmt(v["eval_bpc"]) if v else "—",
                         f"{v['eval_bpc'] - tf['eval_bpc']:+.4f}" if v else "—"])
    sweep = {p: min((r["eval_bpc"] for r in load_results(g) if r["preset"] == p), default=None)
             for p, g in (("ka-1m", "lr-unprojected"), ("tf-1m", "lr"))}
    if None not in sweep.values():
        screened = next((r for r in load_results("screen5") if r["name"] == f"ka-{BUDGET_VARIANT}"), None)
        v = [fmt(screened["eval_bpc"]) + " (screen5)", f"{screened['eval_bpc'] - sweep['tf-1m']:+.4f}"] \
            if screened else ["—", "—"]
        body.insert(0, ["3.0M", "lr (best of each sweep, valid BPC)", fmt(sweep["ka-1m"]), fmt(sweep["tf-1m"]),
                        f"{sweep['ka-1m'] - sweep['tf-1m']:+.4f}", *v])
    if len(body) < 2:
        return "_No longer-budget runs yet (`python -m lab run budget`)._"
    return ("Each row is a pair trained with its own full schedule to that budget (seed 0, each model's swept "
            f"lr); test BPC unless stated. The last two columns: ka-1m with {BUDGET_VARIANT} "
            f"({variant_change(BUDGET_VARIANT)}; outside the paper), "
            "a variant confirmed at 10M, and its gap to the same transformer.\n\n"
            + table(["tokens", "group", "ka-1m", "tf-1m", "gap", "ka-1m variant", "variant gap"], body))


PAPER_BY_SIZE = {"1m": ("1.637", "1.616", "+0.021 (means)"), "5m": ("1.448", "1.452", "−0.004 (medians)")}


def scale_section() -> str:
    """The seed-0 pair at 1M (main; ka-1m on ψ(θ) itself, main-unprojected, as ka-5m's preset still reads it) and
    5M parameters (scale), test BPC, beside the paper's enwik8 numbers."""
    runs: dict[str, dict[str, Any]] = {}
    for r in (r for r in reference_main() + load_results("scale") if r["train"]["seed"] == 0):
        if r["preset"] not in runs or r["eval_bpc"] < runs[r["preset"]]["eval_bpc"]:  # the best lr tried
            runs[r["preset"]] = r
    body = []
    for size, (p_ka, p_tf, p_gap) in PAPER_BY_SIZE.items():
        ka, tf = runs.get(f"ka-{size}"), runs.get(f"tf-{size}")
        if ka and tf:
            body.append([size.upper(), ka["group"], f"{ka['params']:,} / {tf['params']:,}",
                         f"{ka['train']['lr']:g} / {tf['train']['lr']:g}", fmt(ka["eval_bpc"]), fmt(tf["eval_bpc"]),
                         f"{ka['eval_bpc'] - tf['eval_bpc']:+.4f}", f"{p_ka} / {p_tf}, {p_gap}"])
    if len(body) < 2:
        return "_No 5M runs yet (`python -m lab run scale`)._"
    tried = {p: sorted(r["train"]["lr"] for r in load_results("scale") if r["preset"] == p) for p in ("ka-5m", "tf-5m")}
    return ("Seed 0, 10M tokens, the main protocol. No full 5M sweep: each 5M model at the learning rates tried ("
            + "; ".join(f"{p}: {', '.join(f'{x:g}' for x in v)}" for p, v in tried.items() if v)
            + "), the best shown"
            + _uneven_tries(tried)
            + "".join(f"; {p}'s best is the lowest rate tried, so a lower one may be better still"
                      for p, v in tried.items() if len(v) > 1 and runs[p]["train"]["lr"] == v[0])
            + ".\n\n"
            + table(["size", "group", "params ka / tf", "lr ka / tf", "ka test BPC", "tf test BPC", "gap",
                      "paper (enwik8) ka / tf, gap"], body) + _untuned(runs) + _variant_at_5m(runs))


def _variant_at_5m(runs: dict[str, dict[str, Any]]) -> str:
    """The 1M variants on ka-5m (group scale-variant) against ka-5m at the same rate, and beside their 1M Δ."""
    done = {r["name"]: r for r in load_results("scale-variant")}
    if not done:
        return ("\n\nThe best 1M variants at 5M: not run yet (`python -m lab run scale-variant`, after "
                "`scale`).")
    return "".join(_one_variant_at_5m(runs, done[f"ka-5m-{name}"], name)
                   for name in SCALE_VARIANTS if f"ka-5m-{name}" in done)


def _one_variant_at_5m(runs: dict[str, dict[str, Any]], v: dict[str, Any], name: str) -> str:
    base = next((r for r in load_results("scale") if r["preset"] == "ka-5m" and r["train"]["lr"] == v["train"]["lr"]
                 and r["train"]["seed"] == v["train"]["seed"]), None)
    one = {g: next((r for r in load_results(g) if r["name"] == n), None)
           for g, n in (("confirm", f"ka-{name}"), ("main-unprojected", "ka-1m-seed0"))}
    widths = "".join(f"; at 5M {k}={x}, re-matched to ka-5m's parameter count" for k, x in
                     SCALE_WIDTHS.get(name, {}).items())
    text = (f"\n\nThe 1M variant {name} ({variant_change(name)}{widths}; outside the paper) on ka-5m "
            f"at lr {v['train']['lr']:g} (seed {v['train']['seed']}, group scale-variant): test BPC "
            + fmt(v["eval_bpc"]))
    if base:
        text += f", {v['eval_bpc'] - base['eval_bpc']:+.4f} against ka-5m at the same rate"
    text += f"; gap to the best tf-5m {v['eval_bpc'] - runs['tf-5m']['eval_bpc']:+.4f}"
    if None not in one.values():
        moved = one["confirm"]["eval_bpc"] - one["main-unprojected"]["eval_bpc"]
        gap = one["confirm"]["eval_bpc"] - runs["tf-1m"]["eval_bpc"]
        text += f". At 1M the same variant moved seed 0 by {moved:+.4f} (gap {gap:+.4f})"
    return text + "."


def tuning10m_section(group: str, option: str) -> str:
    """Each 1M model at main's setting of a training ``option`` (seed 0) and at the group's, 10M tokens, test BPC."""
    def value(r: dict[str, Any]) -> float:
        return r["train"].get(option, TRAIN_DEFAULTS[option])

    rows = {p: sorted([r for r in reference_main() + load_results(group)  # ka-1m on ψ(θ) itself, as the group's
                       if r["preset"] == p and r["train"]["seed"] == 0], key=value)
            for p in ("ka-1m", "tf-1m")}
    if not all(len({r["group"] for r in rs}) == 2 and group in {r["group"] for r in rs} for rs in rows.values()):
        return f"_Not run yet (`python -m lab run {group}`, after `main`)._"
    body = [[p, r["group"], f"{value(r):g}", fmt(r["eval_bpc"])] for p, rs in rows.items() for r in rs]
    best = {p: min(rs, key=lambda r: r["eval_bpc"]) for p, rs in rows.items()}
    low = [p for p, r in best.items() if r is rows[p][0] and len(rows[p]) > 1]
    main = {p: next(r for r in rs if r["group"] != group) for p, rs in rows.items()}
    gap = best["ka-1m"]["eval_bpc"] - best["tf-1m"]["eval_bpc"]
    main_gap = main["ka-1m"]["eval_bpc"] - main["tf-1m"]["eval_bpc"]
    return (table(["preset", "group", option, "test BPC"], body)
            + f"\n\nEach model at its better {option}: ka-1m {value(best['ka-1m']):g}, tf-1m "
            f"{value(best['tf-1m']):g}; seed-0 gap {gap:+.4f} (main's settings: {main_gap:+.4f})."
            + (f" Best at the lowest {option} tried: {', '.join(low)}; a lower one may be better still."
               if low else ""))


def warmup_intro() -> str:
    """Why warmup10m exists, its figures read from results/screen6 and the protocols."""
    screen = {r["name"]: r for r in with_twins("screen6")}
    steps = {k: cfg["tokens"] / (cfg["batch_size"] * cfg["context"]) for k, cfg in (("3M", SWEEP), ("10M", PROTOCOL))}
    share = {k: f"{PROTOCOL['warmup'] / v:.0%}" for k, v in steps.items()}
    screened = ""
    if "ka-warmup-30" in screen and "ka-default" in screen:
        screened = (f"In round 6 (below) a 30-step warmup instead of {PROTOCOL['warmup']} scored "
                    f"{screen['ka-warmup-30']['eval_bpc'] - screen['ka-default']['eval_bpc']:+.3f} valid BPC at 3M "
                    f"tokens, where {PROTOCOL['warmup']} steps are {share['3M']} of the run ({share['10M']} of the "
                    "protocol's). ")
    return (screened + "It is a training option, so both models get it: `python -m lab run warmup10m`, each 1M "
            "model at its swept rate with warmup 30 (seed 0), against the main pair's seed 0 (ka-1m on ψ(θ) itself).")


def _uneven_tries(tried: dict[str, list[float]]) -> str:
    more, fewer = sorted(tried, key=lambda p: len(tried[p]), reverse=True)
    if len(tried[more]) == len(tried[fewer]):
        return ""
    return (f"; {more} had more rates tried than {fewer}, which favours it: {fewer} may gain from another rate "
            "too")


def _untuned(runs: dict[str, dict[str, Any]]) -> str:
    """A caveat for each family whose 5M model scored worse than its 1M model: its 5M learning rate is off."""
    worse = [f"{f}-5m ({fmt(runs[f'{f}-5m']['eval_bpc'])}) is worse than {f}-1m ({fmt(runs[f'{f}-1m']['eval_bpc'])})"
             for f in ("ka", "tf") if runs[f"{f}-5m"]["eval_bpc"] > runs[f"{f}-1m"]["eval_bpc"]]
    if not worse:
        return ""
    return ("\n\nCaveat: " + "; ".join(worse) + ". Five times the parameters at the same tokens would normally score "
            "better, so that model's learning rate is off its optimum and the 5M gap says little until it is tuned.")
