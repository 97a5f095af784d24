"""The budget curve (issue 26) as tables and plots: the gap per budget and at equal FLOPs, and why it grows."""

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.training.data import CHECKSUMS
from lab import groups, protocol
from lab.groups import BUDGET_PRESETS, BUDGETS, FLOPS_PRESETS, HOMES, STRETCH_BUDGET, valid_estimate, with_twins
from lab.protocol import PROTOCOL, load_results
from lab.retired import retired_settings, without_retired
from lab.writers.common import Run, best, diff, fmt, lr, millions, note, signed, table, throughput

REFERENCE = "tf-1m"
PAIRS = tuple((p, REFERENCE) for p in FLOPS_PRESETS)  # each Kuramoto preset of the curve against the transformer
COLOURS = {"ka-1m": "tab:blue", "ka-1m-tuned": "tab:green", "tf-1m": "tab:orange", "ka-su2-1m-tuned": "tab:purple"}
BENCH_MODE = ("compile" if PROTOCOL["compile"] else "eager", PROTOCOL["precision"])  # the protocol's, as the bench's
TRAIN_BYTES = int(CHECKSUMS["enwik7"][0] * 0.9)  # enwik7's training split (data.py), for a budget's passes over it
LARGEST = f"{BUDGETS[-1] // 1_000_000}M"


def flops_per_token(r: Run) -> int | None:
    """A result's model FLOPs per training token (the bench's count), None for a model the library no longer builds."""
    with contextlib.suppress(Exception):
        if not retired_settings(changed := r.get("model_overrides", {})):
            return groups.flops_per_token(r["preset"], without_retired(changed),
                                          r["train"].get("context", PROTOCOL["context"]))
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
    curve = [p for p in r.get("curve", []) if p.get("train_bpc") is not None]
    if not curve:
        return ["—"] * 3
    first, last = [p for p in curve if p["tokens"] <= TRAIN_BYTES], curve[-1]
    low = min(curve, key=lambda p: p["valid_bpc"])
    rose = last["valid_bpc"] - low["valid_bpc"]
    return [*(f"{p['valid_bpc'] - p['train_bpc']:+.3f} ({p['tokens'] / TRAIN_BYTES:.1f})" if p else "—"
              for p in (first[-1] if first and first[-1] is not last else None, last)),
            f"{rose:+.3f} ({millions(low['tokens'])})" if rose > 0.005 else "—"]


def budget_runs() -> dict[str, dict[str, Run]]:
    """Per budget label, each preset's run there (seed 0, its own schedule; 3M: its sweep's best, on valid)."""
    rows = {"3M": {p: best(r for r in load_results(home.sweep) if r["preset"] == p) for p, home in HOMES.items()},
            "10M": {p: next((r for r in with_twins(home.main) if r["preset"] == p and r["train"].get("seed", 0) == 0),
                            None) for p, home in HOMES.items()},
            "20M": {r["preset"]: r for r in load_results("budget") if r["name"] in ("ka-1m-20m", "tf-1m-20m")}}
    for b, among in [*((b, ("budget40", "lr40")) for b in BUDGETS), (STRETCH_BUDGET, ("budget100",))]:
        rows[f"{b // 1_000_000}M"] = {p: groups.budget_best(p, b, among) for p in HOMES}
    return {k: kept for k, by in rows.items() if (kept := {p: r for p, r in by.items() if r is not None})}


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
    return signed(valid_slope(r))


def off_rate(r: Run) -> bool:
    """Whether a curve run trained at a rate other than its preset's swept one (lr40's; budget100's)."""
    if r.get("group") == "budget100":
        with contextlib.suppress(ConfigError):  # no sweep here: not marked
            return r["train"]["lr"] != groups.swept_rate(r["preset"])
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
             diff(r, by.get(REFERENCE)) if p != REFERENCE else "—", lr(r), *costs(r), *overfit(r)]
            for label, by in runs.items() for p in BUDGET_PRESETS if (r := by.get(p)) is not None]
    return table(["budget", "model", "run", "split", "BPC", "gap to tf-1m", "lr", "model FLOPs/token",
                  "training FLOPs", "valid − train within 1 pass (passes)", "valid − train at the end (passes)",
                  "valid rose (after)"], body) + "".join(note(f"Not run yet: `python -m lab run {g}`") for g, b in (
                      ("budget40", BUDGETS[-1]), ("budget100", STRETCH_BUDGET)) if f"{b // 1_000_000}M" not in runs)


def flops_rows() -> list[tuple[str, str, Run | None, Run | None, Run | None, str]]:
    """(reference budget, preset, tf-1m there, the preset at equal tokens, at equal FLOPs, tokens at equal FLOPs)."""
    runs, flops = budget_runs(), {r["name"]: r for r in with_twins("flops")}
    out = []
    for b in (PROTOCOL["tokens"], *BUDGETS):
        label = f"{b // 1_000_000}M"
        for p in FLOPS_PRESETS:
            tokens = "—"
            with contextlib.suppress(Exception):  # a preset the library cannot build here
                tokens = f"{groups.flop_matched_tokens(p, REFERENCE, b) / 1e6:.2f}M"
            out.append((label, p, runs.get(label, {}).get(REFERENCE), runs.get(label, {}).get(p),
                        flops.get(f"{p}-flops-tf-{label.lower()}"), tokens))
    return out


def flops_section() -> str:
    """The gap at equal training FLOPs (group flops) beside the gap at equal tokens, per reference budget of tf-1m."""
    body = [[f"tf-1m at {label}", fmt(tf["eval_bpc"]) if tf else "not run", p, tokens, fmt(same and same["eval_bpc"]),
             diff(same, tf), fmt(eq["eval_bpc"]) if eq else "not run", fmt_flops(training_flops(eq)), diff(eq, tf)]
            for label, p, tf, same, eq, tokens in flops_rows()]
    return table(["reference", "tf-1m test BPC", "model", "tokens at equal FLOPs", "BPC at equal tokens",
                  "gap at equal tokens", "BPC at equal FLOPs", "training FLOPs", "gap at equal FLOPs"], body) + (
        "" if with_twins("flops") else note("Not run yet: `python -m lab run flops`"))


def bench_rates(pair: tuple[str, str]) -> dict[str, float] | None:
    """The pair's training tokens/s side by side in `python -m benchmarks` (protocol's mode), or None."""
    path = protocol.RESULTS / "bench.json"
    for row in json.loads(path.read_text()).get("training", []) if path.exists() else []:
        if "ka" in row and "tf" in row and (row["ka"]["preset"], row["tf"]["preset"]) == pair \
                and (row["mode"], row["precision"]) == BENCH_MODE:
            return {row["ka"]["preset"]: row["ka"]["median"], row["tf"]["preset"]: row["tf"]["median"]}
    return None


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


def fit_gaps(r: Run, tf: Run) -> list[tuple[int, float, float]]:
    """(tokens, training-BPC gap, validation-BPC gap) of ``r`` to ``tf`` at every evaluation both made."""
    own, ref = ({q["tokens"]: q for q in x.get("curve", []) if q.get("train_bpc") is not None} for x in (r, tf))
    return [(t, q["train_bpc"] - ref[t]["train_bpc"], q["valid_bpc"] - ref[t]["valid_bpc"])
            for t, q in sorted(own.items()) if t in ref]


def per_doubling(runs: dict[str, dict[str, Run]], preset: str, lo: str = "10M", hi: str = LARGEST) -> float | None:
    """Test BPC gained per doubling of the token budget between two budgets of the curve (seed 0, own schedules)."""
    a, b = runs.get(lo, {}).get(preset), runs.get(hi, {}).get(preset)
    if a is None or b is None or model_note(a) or model_note(b):
        return None
    return (b["eval_bpc"] - a["eval_bpc"]) / math.log2(b["tokens"] / a["tokens"])


def anneal_cost(runs: dict[str, dict[str, Run]], preset: str) -> float | None:
    """The largest-budget run's validation estimate at the protocol's tokens minus the protocol run's at its end."""
    short = runs.get(f"{PROTOCOL['tokens'] // 1_000_000}M", {}).get(preset)
    long = next((r for r in with_twins("budget40") if r["preset"] == preset and not model_note(r)
                 and abs(r["tokens"] - BUDGETS[-1]) <= 0.1 * BUDGETS[-1]), None)  # at the swept rate, as the 10M run
    if short is None or long is None or model_note(short) or not (pts := valid_points(short)):
        return None
    end = pts[-1]
    near = min(valid_points(long), key=lambda q: abs(q[0] - end[0]), default=None)
    return near[1] - end[1] if near and abs(near[0] - end[0]) <= 0.05 * end[0] else None


def fit_runs(budget: int = BUDGETS[-1], runs: dict[str, dict[str, Run]] | None = None) -> list[tuple[str, Run]]:
    """Every Kuramoto run of the budget curve at ``budget`` (at the largest, leads40's too), by name."""
    at = (budget_runs() if runs is None else runs).get(f"{budget // 1_000_000}M", {})
    leads = ([(r["name"], r) for r in load_results("leads40") if not groups.flop_matched(r["name"])]
             if budget == BUDGETS[-1] else [])
    return [(p, r) for p, r in at.items() if p != REFERENCE] + leads


def _fits(budget: int, runs: dict[str, dict[str, Run]]) -> list[tuple[str, list[tuple[int, float, float]]]]:
    tf = runs.get(f"{budget // 1_000_000}M", {}).get(REFERENCE)
    return [(name, g) for name, r in fit_runs(budget, runs) if tf is not None and (g := fit_gaps(r, tf))]


def fit_table() -> str:
    """Each Kuramoto run of the largest budgets against tf-1m: the training-BPC and validation-BPC gaps at its end."""
    runs = budget_runs()
    rows = [[name, f"{budget // 1_000_000}M", f"{gaps[-1][1]:+.3f}", f"{gaps[-1][2]:+.3f}", millions(gaps[-1][0], 0),
             millions(ahead[-1][0]) if (ahead := [g for g in gaps if g[1] < 0]) else "never"]
            for budget in (BUDGETS[-1], STRETCH_BUDGET) for name, gaps in _fits(budget, runs)]
    return table(["run", "budget", "training-BPC gap to tf-1m", "validation-BPC gap to tf-1m", "at", "ahead in "
                  "training BPC until"], rows) if rows else ""


def rate_table() -> str:
    """lr40's runs against budget40's at the swept rate, and the gaps to tf-1m at the best and the swept rates."""
    swept = {r["preset"]: r for r in with_twins("budget40") if not model_note(r)}
    lower = sorted((r for r in with_twins("lr40") if r["preset"] in swept),
                   key=lambda r: (r["preset"], -r["train"]["lr"]))
    top, tried = budget_runs().get(LARGEST, {}), {r["preset"] for r in lower}

    def gaps(q: str) -> list[str]:
        if q == REFERENCE or REFERENCE not in tried or not {q, REFERENCE} <= top.keys() or REFERENCE not in swept:
            return ["—", "—"]
        return [diff(top[q], top[REFERENCE]), diff(swept[q], swept[REFERENCE])]

    rows = [[r["preset"], lr(r), fmt(r["eval_bpc"]), lr(w), fmt(w["eval_bpc"]), diff(r, w),
             diff(valid_estimate(r), valid_estimate(w)), *gaps(r["preset"])]
            for r in lower if (w := swept[r["preset"]])]
    return table(["model", "lower lr", f"test BPC at {LARGEST}", "swept lr", "test BPC at the swept lr", "Δ",
                  "Δ validation", "gap to tf-1m at best rates", "gap at swept rates"], rows) if lower else ""


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
    runs = budget_runs()
    series = {p: sorted((r["tokens"], r["eval_bpc"]) for by in runs.values() if (r := by.get(p)) is not None
                        and not model_note(r)) for p in BUDGET_PRESETS}
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


def _curves(p: str) -> list[tuple[Run, list[tuple[int, float]]]]:
    """Every seed-0 run of preset ``p`` on its own model, with its validation points."""
    pool = [r for g in (HOMES[p].main, "budget40", "flops") for r in with_twins(g)]
    return [(r, [q for q in valid_points(r) if q[0] > 0]) for r in pool
            if r["preset"] == p and r["train"].get("seed", 0) == 0 and not model_note(r)]


def compute_plot(out: Path) -> Path | None:
    """Validation BPC against training FLOPs and against seconds at the bench's side-by-side rates, a row per pair."""
    if not any(_curves(p) for pair in PAIRS for p in pair):
        return None
    with figure(out, (11, 4 * len(PAIRS)), len(PAIRS), 110) as grid:
        for row, pair in zip(grid, PAIRS, strict=True):
            rates = bench_rates(pair)
            for ax, x in zip(row, ("flops", "seconds"), strict=True):
                drawn = False
                for p, (r, pts) in ((q, c) for q in pair for c in _curves(q)):
                    per = flops_per_token(r)
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
    if not (series := _fits(BUDGETS[-1], budget_runs())):
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
