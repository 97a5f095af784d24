"""The budget and compute tables (issue 26): test BPC and the gap per token budget, memorisation (valid − train BPC),
model FLOPs per token and training FLOPs, the gap at equal FLOPs beside the gap at equal tokens, the bench's rates,
and the plots of test BPC against budget and of validation BPC against training FLOPs and seconds."""

import contextlib
import json
import math
from pathlib import Path
from typing import Any

from kuramoto_attention.errors import ConfigError
from lab import protocol
from lab.groups import (
    BUDGET_PRESETS,
    BUDGETS,
    FLOPS_PRESETS,
    HOMES,
    STRETCH_BUDGET,
    budget_best,
    flop_matched_tokens,
    swept_rate,
    with_twins,
)
from lab.groups import flops_per_token as preset_flops_per_token
from lab.protocol import PROTOCOL, load_results
from lab.retired import retired_settings, without_retired
from lab.writers.common import Run, diff, fmt, table, throughput

REFERENCE = "tf-1m"
PAIRS = tuple((p, REFERENCE) for p in FLOPS_PRESETS)  # each Kuramoto preset of the curve against the transformer
COLOURS = {"ka-1m": "tab:blue", "ka-1m-tuned": "tab:green", "tf-1m": "tab:orange", "ka-su2-1m-tuned": "tab:purple"}
BENCH_MODE = ("compile" if PROTOCOL["compile"] else "eager", PROTOCOL["precision"])  # the protocol's, as the bench's


def _train_bytes() -> int | None:
    """enwik7's training split (90% of the file: data.py), for the passes a budget makes over it."""
    with contextlib.suppress(Exception):
        from kuramoto_attention.training.data import CHECKSUMS

        return int(CHECKSUMS["enwik7"][0] * 0.9)
    return None


def flops_per_token(r: Run) -> int | None:
    """A result's model FLOPs per training token (the bench's count), None for a model the library no longer builds."""
    if retired_settings(r.get("model_overrides", {})):
        return None
    try:
        return preset_flops_per_token(r["preset"], without_retired(r.get("model_overrides", {})),
                                      r["train"].get("context", PROTOCOL["context"]))
    except Exception:  # a record of a model the library no longer builds (a retired field)
        return None


def training_flops(r: Run | None) -> int | None:
    per = flops_per_token(r) if r else None
    return per * r["tokens"] if per is not None else None


def fmt_flops(x: float | None) -> str:
    return "—" if x is None else f"{x:.2e}"


def fmt_per_token(x: float | None) -> str:
    return "—" if x is None else f"{x / 1e6:.2f}M"


def costs(r: Run | None) -> list[str]:
    """A run's model FLOPs per token and training FLOPs, two cells."""
    return [fmt_per_token(flops_per_token(r)) if r else "—", fmt_flops(training_flops(r))]


def overfit(r: Run) -> list[str]:
    """Memorisation: valid − train BPC within one pass and at the end (passes), and valid's rise (after)."""
    curve, passes = [p for p in r.get("curve", []) if p.get("train_bpc") is not None], _train_bytes()
    if not curve or not passes:
        return ["—"] * 3
    first, last = [p for p in curve if p["tokens"] <= passes], curve[-1]
    low = min(curve, key=lambda p: p["valid_bpc"])
    rose = last["valid_bpc"] - low["valid_bpc"]
    return [*(f"{p['valid_bpc'] - p['train_bpc']:+.3f} ({p['tokens'] / passes:.1f})" if p else "—"
              for p in (first[-1] if first and first[-1] is not last else None, last)),
            f"{rose:+.3f} ({low['tokens'] / 1e6:.1f}M)" if rose > 0.005 else "—"]


def _best(group: str, preset: str) -> Run | None:
    return min((r for r in load_results(group) if r["preset"] == preset), key=lambda r: r["eval_bpc"], default=None)


def budget_runs() -> dict[str, dict[str, Run]]:
    """Per budget label, each preset's run there (seed 0, its own schedule; 3M: its sweep's best, on valid)."""
    rows: dict[str, dict[str, Run]] = {
        "3M": {p: r for p, home in HOMES.items() if (r := _best(home.sweep, p)) is not None},
        "10M": {p: r for p, home in HOMES.items()
                if (r := next((x for x in with_twins(home.main) if x["preset"] == p
                               and x["train"].get("seed", 0) == 0), None)) is not None},
        "20M": {r["preset"]: r for r in load_results("budget") if r["name"] in ("ka-1m-20m", "tf-1m-20m")},
    }
    for b, groups in [*((b, ("budget40", "lr40")) for b in BUDGETS), (STRETCH_BUDGET, ("budget100",))]:
        rows[f"{b // 1_000_000}M"] = {p: r for p in HOMES if (r := budget_best(p, b, groups)) is not None}
    return {k: v for k, v in rows.items() if v}


def valid_points(r: Run) -> list[tuple[int, float]]:
    """(tokens, validation estimate) along a run: its curve, else its older records' valid_curve."""
    pts = r.get("curve") or [{"tokens": t, "valid_bpc": b} for t, b in r.get("valid_curve", [])]
    return [(q["tokens"], q["valid_bpc"]) for q in pts]


def valid_slope(r: Run | None, start: int = PROTOCOL["tokens"]) -> float | None:
    """A run's validation slope per doubling of its tokens from ``start`` to its end (None: no such points)."""
    pts = valid_points(r) if r else []
    near = min(pts, key=lambda q: abs(q[0] - start), default=None)
    if near is None or abs(near[0] - start) > 0.05 * start or pts[-1][0] <= 1.5 * near[0]:
        return None
    return (pts[-1][1] - near[1]) / math.log2(pts[-1][0] / near[0])


def fmt_slope(r: Run | None) -> str:
    return "—" if (x := valid_slope(r)) is None else f"{x:+.3f}"


def off_rate(r: Run) -> bool:
    """Whether a curve run trained at a rate other than its preset's swept one (lr40's; budget100's)."""
    if r.get("group") == "budget100":
        with contextlib.suppress(ConfigError):  # no sweep here: not marked
            return r["train"]["lr"] != swept_rate(r["preset"])
        return False
    return r.get("group") == "lr40" or str(r.get("twin", "")).startswith("lr40/")


def model_note(r: Run) -> str:
    changed = without_retired(r.get("model_overrides", {}))
    return "" if not changed else " (" + ", ".join(f"{k}={v}" for k, v in changed.items()) + ")"


def budget_section() -> str:
    """Every preset at every budget: its run, split, BPC, gap to tf-1m, lr, costs and memorisation."""
    runs = budget_runs()
    if not runs:
        return "_No runs yet (`python -m lab run lr`, `... main`, `... main-tuned`, `... budget`, `... budget40`)._"
    body = [[label, p + model_note(r), r.get("twin", f"{r['group']}/{r['name']}"), r["eval_split"], fmt(r["eval_bpc"]),
             diff(r, by.get(REFERENCE)) if p != REFERENCE else "—", f"{r['train']['lr']:g}", *costs(r), *overfit(r)]
            for label, by in runs.items() for p in BUDGET_PRESETS if (r := by.get(p)) is not None]
    return table(["budget", "model", "run", "split", "BPC", "gap to tf-1m", "lr", "model FLOPs/token",
                  "training FLOPs", "valid − train within 1 pass (passes)", "valid − train at the end (passes)",
                  "valid rose (after)"], body) + "".join(f"\n\n_Not run yet: `python -m lab run {g}`._" for g, b in (
                      ("budget40", BUDGETS[-1]), ("budget100", STRETCH_BUDGET)) if f"{b // 1_000_000}M" not in runs)


def flops_rows() -> list[tuple[str, str, Run | None, Run | None, Run | None, str]]:
    """(reference budget, preset, tf-1m there, the preset at equal tokens, at equal FLOPs, tokens at equal FLOPs)."""
    runs, flops = budget_runs(), {r["name"]: r for r in with_twins("flops")}
    out = []
    for b in (PROTOCOL["tokens"], *BUDGETS):
        label = f"{b // 1_000_000}M"
        for p in FLOPS_PRESETS:
            try:
                tokens = f"{flop_matched_tokens(p, REFERENCE, b) / 1e6:.2f}M"
            except Exception:  # a preset the library cannot build here
                tokens = "—"
            out.append((label, p, runs.get(label, {}).get(REFERENCE), runs.get(label, {}).get(p),
                        flops.get(f"{p}-flops-tf-{label.lower()}"), tokens))
    return out


def flops_section() -> str:
    """The gap at equal training FLOPs (group flops) beside the gap at equal tokens, per reference budget of tf-1m."""
    body = [[f"tf-1m at {label}", fmt(tf["eval_bpc"]) if tf else "not run", p, tokens, fmt(same and same["eval_bpc"]),
             diff(same, tf), fmt(eq["eval_bpc"]) if eq else "not run", fmt_flops(training_flops(eq)), diff(eq, tf)]
            for label, p, tf, same, eq, tokens in flops_rows()]
    note = "" if with_twins("flops") else "\n\n_Not run yet: `python -m lab run flops`._"
    return table(["reference", "tf-1m test BPC", "model", "tokens at equal FLOPs", "BPC at equal tokens",
                  "gap at equal tokens", "BPC at equal FLOPs", "training FLOPs", "gap at equal FLOPs"], body) + note


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, out: Path) -> Path:
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    pyplot().close(fig)
    return out


def budget_plot(out: Path) -> Path | None:
    """Test BPC (3M: valid) against the token budget, log scale, one line per 1M preset (seed 0)."""
    runs = budget_runs()
    series = {p: sorted((r["tokens"], r["eval_bpc"]) for by in runs.values() if (r := by.get(p)) is not None
                        and not model_note(r)) for p in BUDGET_PRESETS}
    if sum(len(v) for v in series.values()) < 2:
        return None
    fig, ax = pyplot().subplots(figsize=(6.4, 4), dpi=120)
    for p, pts in series.items():
        if pts:
            ax.plot([t for t, _ in pts], [b for _, b in pts], "o-", color=COLOURS[p], label=p)
    ax.set(xscale="log", xlabel="training tokens (log scale)", ylabel="enwik7 test BPC (3M: validation)",
           title="test BPC against the budget (seed 0, own schedule)")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    return _save(fig, out)


def _curves(p: str) -> list[tuple[Run, list[dict[str, float]]]]:
    """Every seed-0 run of preset ``p`` on its own model, with its validation points."""
    pool = [r for g in (HOMES[p].main, "budget40", "flops") for r in with_twins(g)]
    return [(r, [x for x in (r.get("curve") or [{"tokens": t, "valid_bpc": b} for t, b in r.get("valid_curve", [])])
                 if x["tokens"] > 0])
            for r in pool if r["preset"] == p and r["train"].get("seed", 0) == 0 and not model_note(r)]


def bench_rates(pair: tuple[str, str]) -> dict[str, float] | None:
    """The pair's training tokens/s side by side in `python -m benchmarks` (protocol's mode), or None."""
    path = protocol.RESULTS / "bench.json"
    if not path.exists():
        return None
    for row in json.loads(path.read_text()).get("training", []):
        if "ka" in row and "tf" in row and (row["ka"]["preset"], row["tf"]["preset"]) == pair \
                and (row["mode"], row["precision"]) == BENCH_MODE:
            return {row["ka"]["preset"]: row["ka"]["median"], row["tf"]["preset"]: row["tf"]["median"]}
    return None


def compute_plot(out: Path) -> Path | None:
    """Validation BPC against training FLOPs and against seconds at the bench's side-by-side rates, a row per pair."""
    if not any(_curves(p) for pair in PAIRS for p in pair):
        return None
    fig, axes = pyplot().subplots(len(PAIRS), 2, figsize=(11, 4 * len(PAIRS)), dpi=110, squeeze=False)
    for row, pair in zip(axes, PAIRS, strict=True):
        rates = bench_rates(pair)
        for ax, x in zip(row, ("flops", "seconds"), strict=True):
            drawn = False
            for p in pair:
                for r, pts in _curves(p):
                    per = flops_per_token(r)
                    xs = [(q["tokens"] * per if per else None) if x == "flops" else
                          (q["tokens"] / rates[p] if rates else None) for q in pts]
                    keep = [(a, q["valid_bpc"]) for a, q in zip(xs, pts, strict=True) if a]
                    if keep:
                        ax.plot(*zip(*keep, strict=True), color=COLOURS[p], lw=1.2, alpha=0.85,
                                label=f"{p} ({r['tokens'] / 1e6:.0f}M tokens)")
                        drawn = True
            ax.set(xlabel="training FLOPs" if x == "flops" else
                   f"training seconds at the bench's side-by-side {' '.join(BENCH_MODE)} rates",
                   ylabel="validation BPC (estimate)", title=f"{pair[0]} vs {pair[1]}")
            ax.set_ylim(top=3.2)
            ax.grid(alpha=0.3, which="both")
            if drawn:
                ax.set_xscale("log")
                ax.legend(fontsize=7)
            else:
                ax.text(0.5, 0.5, "no runs yet" if x == "flops" or rates else "no bench row for this pair",
                        ha="center", va="center", transform=ax.transAxes)
    return _save(fig, out)


def bench_table() -> str:
    """The bench's rates of each pair, its load average, and tf-1m's own recorded rates' spread."""
    rates = [(pair, r) for pair in PAIRS if (r := bench_rates(pair))]
    if not rates:
        return ""
    load = json.loads((protocol.RESULTS / "bench.json").read_text()).get("machine", {}).get("load_average_at_start")
    own = [x for r, _ in _curves(REFERENCE) if (x := throughput(r)) is not None]
    body = [[f"{a} / {b}, bench ({' '.join(BENCH_MODE)})", f"{r[a]:,.0f} / {r[b]:,.0f}"] for (a, b), r in rates]
    body += [["bench load average at its start", f"{load:.2f}"]] if isinstance(load, int | float) else []
    body += [[f"{REFERENCE}'s runs' own recorded rates, min / max", f"{min(own):,.0f} / {max(own):,.0f}"]] \
        if len(own) > 1 else []
    return table(["training tokens/s", "value"], body)


def plots() -> dict[str, Path | None]:
    return {"budget": budget_plot(protocol.RESULTS / "budget.png"),
            "compute": compute_plot(protocol.RESULTS / "compute.png")}
