"""The notebook's and the summary's budget and compute sections (issue 26): test BPC and the gap per token budget
(3M sweep, 10M main, 20M budget, 40M budget40), where training starts to overfit (the runs' train/valid "curve"),
each model's model FLOPs per token and training FLOPs, the gap at equal FLOPs (group flops) beside the gap at equal
tokens, and the plots of test BPC against budget and of validation BPC against training FLOPs and seconds of training
(at the bench's side-by-side rates)."""

import contextlib
import json
from pathlib import Path
from typing import Any

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
from lab.writers.common import fmt, table

REFERENCE = "tf-1m"
PAIRS = tuple((p, REFERENCE) for p in FLOPS_PRESETS)  # each Kuramoto preset of the curve against the transformer
COLOURS = {"ka-1m": "tab:blue", "ka-1m-tuned": "tab:green", "tf-1m": "tab:orange", "ka-su2-1m-tuned": "tab:purple"}


def _train_bytes() -> int | None:
    """enwik7's training split (90% of the file: data.py), for the passes a budget makes over it."""
    with contextlib.suppress(Exception):
        from kuramoto_attention.training.data import CHECKSUMS

        return int(CHECKSUMS["enwik7"][0] * 0.9)
    return None


def _flops_per_token(preset: str, overrides: dict[str, Any], context: int) -> int | None:
    try:
        return preset_flops_per_token(preset, overrides, context)
    except Exception:  # a record of a model the library no longer builds (a retired field)
        return None


def flops_per_token(r: dict[str, Any]) -> int | None:
    """A result's model FLOPs per training token (``diagnostics.flops.model_flops``, the bench's count), or None."""
    if retired_settings(r.get("model_overrides", {})):  # a model the library no longer builds
        return None
    return _flops_per_token(r["preset"], without_retired(r.get("model_overrides", {})),
                            r["train"].get("context", PROTOCOL["context"]))


def training_flops(r: dict[str, Any]) -> int | None:
    per = flops_per_token(r)
    return per * r["tokens"] if per is not None else None


def fmt_flops(x: float | None) -> str:
    return "—" if x is None else f"{x:.2e}"


def fmt_per_token(x: float | None) -> str:
    return "—" if x is None else f"{x / 1e6:.2f}M"


def overfit(r: dict[str, Any]) -> str:
    """How far training memorises enwik7's training bytes: valid − train BPC (the mean training BPC since the
    previous evaluation) at the last point within one pass and at the end, and whether valid BPC ever rose.

    Train below valid is no sign of it: enwik7's validation bytes are harder than its training bytes from the first
    pass on (every run's curve), so what says the model has begun to fit its training bytes rather than the text is
    that difference growing once it sees them again, and overfitting proper is the validation BPC rising."""
    curve = [p for p in r.get("curve", []) if p.get("train_bpc") is not None]
    passes = _train_bytes()
    if not curve or not passes:
        return "—"
    first = [p for p in curve if p["tokens"] <= passes]
    last = curve[-1]
    end = f"{last['valid_bpc'] - last['train_bpc']:+.3f} at the end ({last['tokens'] / passes:.1f} passes)"
    text = (f"{first[-1]['valid_bpc'] - first[-1]['train_bpc']:+.3f} at {first[-1]['tokens'] / passes:.1f} "
            f"passes → {end}" if first and first[-1] is not last else end)
    low = min(curve, key=lambda p: p["valid_bpc"])
    rose = last["valid_bpc"] - low["valid_bpc"]
    return text + (f"; valid rose {rose:+.3f} after {low['tokens'] / 1e6:.1f}M" if rose > 0.005 else
                   "; valid still falling")


def _seed0(group: str, preset: str) -> dict[str, Any] | None:
    return next((r for r in with_twins(group) if r["preset"] == preset and r["train"].get("seed", 0) == 0), None)


def _best(group: str, preset: str) -> dict[str, Any] | None:
    return min((r for r in load_results(group) if r["preset"] == preset), key=lambda r: r["eval_bpc"], default=None)


def budget_runs() -> dict[str, dict[str, dict[str, Any]]]:
    """Per budget label, each preset of the curve's run there (seed 0, its own full schedule and swept rate; 3M: the
    best rate of its sweep, on valid; 10M: seed 0 of its protocol group)."""
    rows: dict[str, dict[str, dict[str, Any]]] = {
        "3M": {p: r for p, home in HOMES.items() if (r := _best(home.sweep, p)) is not None},
        "10M": {p: r for p, home in HOMES.items() if (r := _seed0(home.main, p)) is not None},
        "20M": {r["preset"]: r for r in load_results("budget") if r["name"] in ("ka-1m-20m", "tf-1m-20m")},
    }
    for b, groups in [*((b, ("budget40", "lr40")) for b in BUDGETS), (STRETCH_BUDGET, ("budget100",))]:
        rows[f"{b // 1_000_000}M"] = {p: r for p in HOMES if (r := budget_best(p, b, groups)) is not None}
    return {k: v for k, v in rows.items() if v}


def valid_points(r: dict[str, Any]) -> list[tuple[int, float]]:
    """(tokens, validation estimate) along a run: its curve, else its older records' valid_curve."""
    pts = r.get("curve") or [{"tokens": t, "valid_bpc": b} for t, b in r.get("valid_curve", [])]
    return [(q["tokens"], q["valid_bpc"]) for q in pts]


def valid_slope(r: dict[str, Any] | None, start: int = PROTOCOL["tokens"]) -> float | None:
    """A run's validation slope per doubling of its tokens, within the run: (its estimate at the end − at ``start``
    tokens, an evaluation within 5% of it) / log2(end / start); None: no such evaluations (issue 46's measure)."""
    import math

    pts = valid_points(r) if r else []
    near = min(pts, key=lambda q: abs(q[0] - start), default=None)
    if near is None or abs(near[0] - start) > 0.05 * start or pts[-1][0] <= 1.5 * near[0]:
        return None
    return (pts[-1][1] - near[1]) / math.log2(pts[-1][0] / near[0])


def fmt_slope(r: dict[str, Any] | None) -> str:
    return "—" if (x := valid_slope(r)) is None else f"{x:+.3f}"


def off_rate(r: dict[str, Any]) -> bool:
    """Whether a curve run trained at a rate other than its preset's swept one (group lr40's; budget100's, which
    train at the rate best at 40M)."""
    if r.get("group") == "budget100":
        return r["train"]["lr"] != swept_rate(r["preset"])
    return r.get("group") == "lr40" or str(r.get("twin", "")).startswith("lr40/")


def model_note(r: dict[str, Any]) -> str:
    changed = without_retired(r.get("model_overrides", {}))
    return "" if not changed else " (" + ", ".join(f"{k}={v}" for k, v in changed.items()) + ")"


def budget_section() -> str:
    runs = budget_runs()
    if not runs:
        return "_No runs yet (`python -m lab run lr`, `... main`, `... main-tuned`, `... budget`, `... budget40`)._"
    last = f"{BUDGETS[-1] // 1_000_000}M"
    more = "" if last in runs else f" The {last} runs: not run yet (`python -m lab run budget40`)."
    stretch = f"{STRETCH_BUDGET // 1_000_000}M"
    if stretch not in runs:
        more += f" The {stretch} stretch (tf-1m, ka-1m-tuned): not run yet (`python -m lab run budget100`)."
    body = []
    for label, by_preset in runs.items():
        tf = by_preset.get(REFERENCE)
        for p in BUDGET_PRESETS:
            r = by_preset.get(p)
            if r is None:
                continue
            gap = f"{r['eval_bpc'] - tf['eval_bpc']:+.4f}" if tf and r is not tf else "—"
            body.append([label, p + model_note(r), r.get("twin", f"{r['group']}/{r['name']}"), r["eval_split"],
                         fmt(r["eval_bpc"]), gap, fmt_per_token(flops_per_token(r)), fmt_flops(training_flops(r)),
                         overfit(r)])
    return ("Each row a model trained with its own full schedule (warmup, cosine to the budget, its swept rate) to "
            "that budget, seed 0 (3M: the best rate of the 3M sweep, scored on the validation split; 40M: the better "
            "on validation of budget40's run and lr40's at half the rate, where lr40 has one); the gap is to "
            "tf-1m at the same budget. Memorisation: validation − training BPC (the mean training BPC since the "
            "previous evaluation; validation: the run's estimate) at the last evaluation within one pass over enwik7's "
            "9M training bytes and at the end, and whether the validation BPC rose (recorded by runs made since the "
            "budget40 group was added; older runs: —). enwik7's validation bytes are harder than its training bytes "
            "from the first pass on, so training below validation is no sign of overfitting; the difference growing "
            "after one pass is what shows memorisation." + more + "\n\n"
            + table(["budget", "model", "run", "split", "BPC", "gap to tf-1m", "model FLOPs/token", "training FLOPs",
                     "valid − train (1 pass → end)"], body))


def flops_section() -> str:
    """The gap at equal training FLOPs (group flops) beside the gap at equal tokens, per reference budget of tf-1m."""
    runs = budget_runs()
    flops = {r["name"]: r for r in with_twins("flops")}
    body = []
    for b in (PROTOCOL["tokens"], *BUDGETS):
        label = f"{b // 1_000_000}M"
        tf = runs.get(label, {}).get(REFERENCE)
        for p in FLOPS_PRESETS:
            same_tokens = runs.get(label, {}).get(p)
            eq = flops.get(f"{p}-flops-tf-{label.lower()}")
            try:
                tokens = f"{flop_matched_tokens(p, REFERENCE, b) / 1e6:.2f}M"
            except Exception:  # a preset the library cannot build here
                tokens = "—"
            body.append([f"tf-1m at {label}", fmt(tf["eval_bpc"]) if tf else "not run", p, tokens,
                         fmt(same_tokens["eval_bpc"]) if same_tokens else "—",
                         f"{same_tokens['eval_bpc'] - tf['eval_bpc']:+.4f}" if same_tokens and tf else "—",
                         fmt(eq["eval_bpc"]) if eq else "not run", fmt_flops(training_flops(eq)) if eq else "—",
                         f"**{eq['eval_bpc'] - tf['eval_bpc']:+.4f}**" if eq and tf else "—"])
    note = "" if flops else " None of the equal-FLOP runs exists yet: `python -m lab run flops` trains them."
    return ("Each Kuramoto preset trained, with its own full schedule, for the token budget at which its training "
            "FLOPs (model FLOPs per token × tokens) equal tf-1m's at the reference budget (group flops, seed 0), "
            "beside the same preset at the reference's own tokens (equal tokens: the preset's protocol group, "
            "budget40), test BPC." + note
            + "\n\n" + table(["reference", "tf-1m test BPC", "model", "tokens at equal FLOPs", "BPC at equal tokens",
                              "gap at equal tokens", "BPC at equal FLOPs", "training FLOPs", "gap at equal FLOPs"],
                             body))


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def budget_plot(out: Path) -> Path | None:
    """Test BPC (3M: valid) against the token budget, log scale, one line per 1M preset (seed 0)."""
    runs = budget_runs()
    series = {p: sorted((r["tokens"], r["eval_bpc"]) for by in runs.values() if (r := by.get(p)) is not None
                        and not model_note(r)) for p in BUDGET_PRESETS}
    if sum(len(v) for v in series.values()) < 2:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4), dpi=120)
    for p, pts in series.items():
        if pts:
            ax.plot([t for t, _ in pts], [b for _, b in pts], "o-", color=COLOURS[p], label=p)
    ax.set_xscale("log")
    ax.set_xlabel("training tokens (log scale)")
    ax.set_ylabel("enwik7 test BPC (3M: validation)")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    ax.set_title("test BPC against the budget (seed 0, own schedule)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def _curves(p: str) -> list[tuple[dict[str, Any], list[dict[str, float]]]]:
    """Every seed-0 run of preset ``p`` on its own model at the protocol (10M, 40M and the equal-FLOP budgets), with
    its validation points ({tokens, valid_bpc, ...})."""
    pool = [r for g in (HOMES[p].main, "budget40", "flops") for r in with_twins(g)]
    out = []
    for r in pool:
        if r["preset"] != p or r["train"].get("seed", 0) != 0 or model_note(r):
            continue
        pts = r.get("curve") or [{"tokens": t, "valid_bpc": b} for t, b in r.get("valid_curve", [])]
        out.append((r, [x for x in pts if x["tokens"] > 0]))
    return out


# the protocol's training mode, as the bench names it
BENCH_MODE = ("compile" if PROTOCOL["compile"] else "eager", PROTOCOL["precision"])


def bench_rates(pair: tuple[str, str]) -> dict[str, float] | None:
    """The pair's training tokens/s as the bench measured them side by side (ka and tf alternating) in the protocol's
    mode (results/bench.json, `python -m benchmarks`), or None where it has no such row (or that row failed).

    The runs' own recorded seconds are not comparable: they ran on whichever machine and load each session had
    (``compute_caption`` gives the spread), so one side-by-side measurement per pair turns each run's tokens into
    seconds on one machine."""
    path = protocol.RESULTS / "bench.json"
    if not path.exists():
        return None
    for row in json.loads(path.read_text()).get("training", []):
        if "ka" not in row or "tf" not in row:  # a mode that failed on the bench's machine: its error only
            continue
        if (row["ka"]["preset"], row["tf"]["preset"]) == pair and (row["mode"], row["precision"]) == BENCH_MODE:
            return {row["ka"]["preset"]: row["ka"]["median"], row["tf"]["preset"]: row["tf"]["median"]}
    return None


def compute_plot(out: Path) -> Path | None:
    """Validation BPC against training FLOPs and against seconds of training on the bench's machine (each run's
    tokens over its preset's side-by-side bench rate, ``bench_rates``), one row of panels per pair."""
    if not any(_curves(p) for pair in PAIRS for p in pair):
        return None
    plt = pyplot()
    fig, axes = plt.subplots(len(PAIRS), 2, figsize=(11, 4 * len(PAIRS)), dpi=110, squeeze=False)
    for row, pair in zip(axes, PAIRS, strict=True):
        rates = bench_rates(pair)
        for ax, x in zip(row, ("flops", "seconds"), strict=True):
            drawn = False
            for p in pair:
                for r, pts in _curves(p):
                    per = flops_per_token(r)
                    if x == "flops":
                        xs = [q["tokens"] * per if per else None for q in pts]
                    else:
                        xs = [q["tokens"] / rates[p] if rates else None for q in pts]
                    keep = [(a, q["valid_bpc"]) for a, q in zip(xs, pts, strict=True) if a]
                    if keep:
                        ax.plot(*zip(*keep, strict=True), color=COLOURS[p], lw=1.2, alpha=0.85,
                                label=f"{p} ({r['tokens'] / 1e6:.0f}M tokens)")
                        drawn = True
            ax.set_xlabel("training FLOPs" if x == "flops" else
                          f"training seconds at the bench's side-by-side {' '.join(BENCH_MODE)} rates")
            ax.set_ylabel("validation BPC (estimate)")
            ax.set_ylim(top=3.2)
            ax.grid(alpha=0.3, which="both")
            ax.set_title(f"{pair[0]} vs {pair[1]}")
            if drawn:
                ax.set_xscale("log")
                ax.legend(fontsize=7)
            else:
                ax.text(0.5, 0.5, "no runs yet" if x == "flops" or rates else
                        f"no {' '.join(BENCH_MODE)} row for this pair\nin results/bench.json (`python -m benchmarks`)",
                        ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def compute_caption() -> str:
    """What the compute plot's seconds are, with the bench's rates and the spread of the runs' own recorded rates."""
    from lab.writers.common import throughput

    rates = [(pair, bench_rates(pair)) for pair in PAIRS]
    known = "; ".join(f"{a} {r[a]:,.0f} / {b} {r[b]:,.0f}" for (a, b), r in rates if r)
    if not known:
        return ""
    load = json.loads((protocol.RESULTS / "bench.json").read_text()).get("machine", {}).get("load_average_at_start")
    own = [x for r, _ in _curves(REFERENCE) if (x := throughput(r)) is not None]
    spread = (f" (the same {REFERENCE} recorded {min(own):,.0f} tokens/s in one run and {max(own):,.0f} in another)"
              if len(own) > 1 else "")
    return (f"Right-hand panels: each run's tokens over its preset's training rate in `python -m benchmarks`' "
            f"{' '.join(BENCH_MODE)} measurement, ka and tf alternating (results/bench.json, tokens/s: {known}"
            + (f"; load average {load:.2f} at its start" if isinstance(load, int | float) else "")
            + "), so a pair's ratio is fair and the absolute seconds are that machine's. The runs' own recorded "
            f"seconds are not comparable: they ran under whatever load each session had{spread}.")


def plots() -> dict[str, Path | None]:
    return {"budget": budget_plot(protocol.RESULTS / "budget.png"),
            "compute": compute_plot(protocol.RESULTS / "compute.png")}
