"""The budget curve (issue 26) as tables and plots: the gap per budget and at equal FLOPs, and why it grows."""

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lab import protocol, select
from lab.groups import BUDGET_PRESETS, BUDGETS, FLOPS_PRESETS, STRETCHES, valid_estimate, with_twins
from lab.select import BENCH_MODE, LARGEST, REFERENCE, Run
from lab.writers.common import changes, costs, diff, fmt, fmt_flops, lr, millions, note, table
from lab.writers.run_table import BPC, RUN, group_table

PAIRS = tuple((p, REFERENCE) for p in FLOPS_PRESETS)  # each Kuramoto preset of the curve against the transformer
COLOURS = {"ka-1m": "tab:blue", "ka-1m-tuned": "tab:green", "tf-1m": "tab:orange", "ka-su2-1m-tuned": "tab:purple"}


def overfit_cells(r: Run) -> list[str]:
    """Memorisation (``select.overfit``): valid − train BPC within one pass and at the end (passes), and valid's rise
    (after)."""
    within, end, rose = select.overfit(r)
    return [*("—" if x is None else f"{x[0]:+.3f} ({x[1]:.1f})" for x in (within, end)),
            "—" if rose is None else f"{rose[0]:+.3f} ({millions(rose[1])})"]


def budget_section() -> str:
    """Every preset at every budget: its run, split, BPC, gap to tf-1m, lr, costs and memorisation."""
    runs = select.budget_runs()
    if not runs:
        return "_No runs yet (`python -m lab run lr`, `... main`, `... main-tuned`, `... budget40`)._"
    body = [[label, p + (f" ({changes(c)})" if (c := select.changed(r)) else ""),  # its overrides, if any
             r.get("twin", f"{r['group']}/{r['name']}"), r["eval_split"], fmt(r["eval_bpc"]),
             diff(r, by.get(REFERENCE)) if p != REFERENCE else "—", lr(r), *costs(r), *overfit_cells(r)]
            for label, by in runs.items() for p in BUDGET_PRESETS if (r := by.get(p)) is not None]
    return table(["budget", "model", "run", "split", "BPC", "gap to tf-1m", "lr", "model FLOPs/token",
                  "training FLOPs", "valid − train within 1 pass (passes)", "valid − train at the end (passes)",
                  "valid rose (after)"], body) + "".join(note(f"Not run yet: `python -m lab run {g}`") for g, b in (
                      ("budget40", BUDGETS[-1]), *STRETCHES.items()) if f"{b // 1_000_000}M" not in runs)


def flops_section(pool: list[Run] | None = None) -> str:
    """Group flops: each Kuramoto preset at tf-1m's training FLOPs of a budget, and its gap to tf-1m at that budget."""
    tf = {label.lower(): by.get(REFERENCE) for label, by in select.budget_runs().items()}

    def gap(r: Run) -> str:
        return diff(r, tf.get(r["name"].split("-flops-tf-")[-1]))

    columns = (RUN, ("tokens", lambda r: millions(r["tokens"], 2)),
               ("training FLOPs", lambda r: fmt_flops(select.training_flops(r))), BPC,
               ("gap to tf-1m at the budget it matches", gap))
    return group_table("flops", columns, pool)


def bench_table() -> str:
    """The bench's rates of each pair (the curve's presets, then the studies', against tf-1m), its load average, and
    tf-1m's own recorded rates' spread."""
    pairs = dict.fromkeys((*PAIRS, *((s.preset, REFERENCE) for s in select.STUDIES)))
    rates = [(pair, r) for pair in pairs if (r := select.bench_rates(pair))]
    if not rates:
        return ""
    load = json.loads((protocol.RESULTS / "bench.json").read_text()).get("machine", {}).get("load_average_at_start")
    own = [x for r, _ in select.curves(REFERENCE) if (x := select.throughput(r)) is not None]
    body = [[f"{a} / {b}, bench ({' '.join(BENCH_MODE)})", f"{r[a]:,.0f} / {r[b]:,.0f}"] for (a, b), r in rates]
    body += [["bench load average at its start", f"{load:.2f}"]] if isinstance(load, int | float) else []
    body += [[f"{REFERENCE}'s runs' own recorded rates, min / max", f"{min(own):,.0f} / {max(own):,.0f}"]] \
        if len(own) > 1 else []
    return table(["training tokens/s", "value"], body)


def fit_table() -> str:
    """Each Kuramoto run of the largest budgets against tf-1m: the training-BPC and validation-BPC gaps at its end."""
    runs = select.budget_runs()
    rows = [[name, f"{budget // 1_000_000}M", f"{gaps[-1][1]:+.3f}", f"{gaps[-1][2]:+.3f}", millions(gaps[-1][0], 0),
             millions(ahead[-1][0]) if (ahead := [g for g in gaps if g[1] < 0]) else "never"]
            for budget in (BUDGETS[-1], *STRETCHES.values()) for name, gaps in select.fits(budget, runs)]
    return table(["run", "budget", "training-BPC gap to tf-1m", "validation-BPC gap to tf-1m", "at", "ahead in "
                  "training BPC until"], rows) if rows else ""


def rate_table() -> str:
    """lr40's runs against budget40's at the swept rate: each one's test BPC and validation estimate (what chooses
    the curve's point)."""
    swept, lower = select.swept_and_lower()
    rows = [[r["preset"], *(x for run in (r, w) for x in (lr(run), fmt(run["eval_bpc"]), fmt(valid_estimate(run))))]
            for r in lower if (w := swept[r["preset"]])]
    return table(["model", "lower lr", f"test BPC at {LARGEST}", "validation estimate", "swept lr",
                  "test BPC at the swept lr", "validation estimate at the swept lr"], rows) if lower else ""


def _top(shares: dict[str, float], top: int = 3) -> str:
    return ", ".join(f"{k} {v:.0%}" for k, v in sorted(shares.items(), key=lambda kv: -kv[1])[:top])


def clip_table(results: list[Run], least: int = 10) -> str:
    """Each run's clipped steps after its warmup (runner.clipping) and where its gradient sits (all, clipped)."""
    rows = []
    for r in sorted((r for r in results if r.get("clipping")),
                    key=lambda r: (-r["clipping"]["clipped_steps"] / r["clipping"]["steps"], r["name"])):
        c, parts, t = r["clipping"], r["clipping"].get("parts"), r["train"]
        omega = t["omega_lr_mult"] if t.get("omega_lr_mult") is not None else t["phase_lr_mult"]  # make_optimizer's
        rows.append([r["name"], r["group"], f"×{omega:g}" if r["family"] == "kuramoto" else "—",
                     "—" if t.get("clip_angles_apart") else f"{c['clipped_steps'] / c['steps']:.2%}",
                     f"{c['clipped_steps']} of {c['steps']:,}", _top(parts["all"]) if parts else "—",
                     _top(parts["clipped"]) if parts and c["clipped_steps"] >= least else "—"])
    return table(["run", "group", "ω lr", "steps above the clip", "count", "gradient share, all steps",
                  "gradient share, clipped steps"], rows) if rows else ""


@contextlib.contextmanager
def figure(out: Path, size: tuple[float, float] = (6.4, 4), rows: int = 0, dpi: int = 120) -> Iterator[Any]:
    """A new off-screen figure's axes (``rows``: a grid of that many rows of two), saved to ``out`` after the block."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(rows, 2, figsize=size, dpi=dpi, squeeze=False) if rows else \
        plt.subplots(figsize=size, dpi=dpi)
    yield ax
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)


def curve_plot(out: Path) -> Path | None:
    """Validation BPC against tokens of main's and main-tuned's runs (before main: the first screen's)."""
    shown = ["main", "main-tuned"] if with_twins("main") else ["screen"]
    if not (rows := [r for g in shown for r in with_twins(g)]):
        return None
    with figure(out, (7, 4.2)) as ax:
        for r in rows:
            ax.plot([t / 1e6 for t, _ in r["valid_curve"]], [b for _, b in r["valid_curve"]], lw=1.2, alpha=0.8,
                    color=COLOURS.get(r["preset"], "tab:gray"), label=r["preset"])
        uniq = dict(zip(*reversed(ax.get_legend_handles_labels()), strict=True))  # each preset once
        ax.legend(uniq.values(), uniq.keys())
        ax.set(xlabel="training tokens (millions)", ylabel="validation bits per byte (estimate)",
               title=f"{', '.join(shown)}: validation BPC vs tokens")
        ax.set_ylim(top=min(4.0, ax.get_ylim()[1]))
        ax.grid(alpha=0.3)
    return out


def budget_plot(out: Path) -> Path | None:
    """Test BPC (3M: valid) against the token budget, log scale, one line per 1M preset (seed 0)."""
    runs = select.budget_runs()
    series = {p: sorted((r["tokens"], r["eval_bpc"]) for by in runs.values() if (r := by.get(p)) is not None
                        and not select.changed(r)) for p in BUDGET_PRESETS}
    if sum(len(v) for v in series.values()) < 2:
        return None
    with figure(out) as ax:
        for p, pts in ((p, pts) for p, pts in series.items() if pts):
            ax.plot([t for t, _ in pts], [b for _, b in pts], "o-", color=COLOURS[p], label=p)
        ax.set(xscale="log", xlabel="training tokens (log scale)", ylabel="enwik7 test BPC (3M: validation)",
               title="test BPC against the budget (seed 0, own schedule)")
        ax.grid(alpha=0.3, which="both")
        ax.legend()
    return out


def compute_plot(out: Path) -> Path | None:
    """Validation BPC against training FLOPs and against seconds at the bench's side-by-side rates, a row per pair."""
    if not any(select.curves(p) for pair in PAIRS for p in pair):
        return None
    with figure(out, (11, 4 * len(PAIRS)), len(PAIRS), 110) as grid:
        for row, pair in zip(grid, PAIRS, strict=True):
            rates = select.bench_rates(pair)
            for ax, x in zip(row, ("flops", "seconds"), strict=True):
                drawn = False
                for p, (r, pts) in ((q, c) for q in pair for c in select.curves(q)):
                    per = select.flops_per_token(r)
                    xs = [(t * per if per else None) if x == "flops" else (t / rates[p] if rates else None)
                          for t, _ in pts]
                    if keep := [(a, v) for a, (_, v) in zip(xs, pts, strict=True) if a]:
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
    return out


def fit_plot(out: Path) -> Path | None:
    """The gap to tf-1m along each largest-budget Kuramoto run, in training BPC and in validation BPC."""
    if not (series := select.fits(BUDGETS[-1], select.budget_runs())):
        return None
    with figure(out) as ax:
        for i, (name, gaps) in enumerate(series):
            colour, xs = COLOURS.get(name, f"C{i % 10}"), [t / 1e6 for t, _, _ in gaps]  # else the default cycle
            ax.plot(xs, [g for _, g, _ in gaps], "-", color=colour, label=f"{name}: training")
            ax.plot(xs, [g for _, _, g in gaps], ":", color=colour, label=f"{name}: validation")
        ax.axhline(0, color="grey", lw=0.8)
        ax.set(xlabel="training tokens (M)", ylabel="BPC minus tf-1m's at the same tokens",
               title=f"the gap along the {LARGEST}-token runs (seed 0)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return out


def plots() -> dict[str, Path | None]:
    return {name: draw(protocol.RESULTS / f"{name}.png") for name, draw in (
        ("curves", curve_plot), ("budget", budget_plot), ("compute", compute_plot), ("fit", fit_plot))}
