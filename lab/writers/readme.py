"""README.md's generated tables, each written between two markers so that the README's figures, like RESULTS.md's,
come from a command (``python -m lab report``): the headline (the 1M comparison on enwik7 beside the paper's numbers,
from results/) and the presets (their exact parameter counts, from ``models.presets.preset_table``)."""

import re
import statistics
from pathlib import Path

from kuramoto_attention.models.presets import preset_table
from lab.groups import BUDGETS, FLOPS_PRESETS, STRETCH_BUDGET, flop_matched, flops_per_token, valid_estimate, with_twins
from lab.writers import compute, size
from lab.writers.common import fmt, mean_sd, seed_runs, table
from lab.writers.compute import BENCH_MODE, bench_rates
from lab.writers.summary import PAPER_1M

START, END = "<!-- headline: written by `python -m lab report` -->", "<!-- /headline -->"
PRESETS_START, PRESETS_END = "<!-- presets: written by `python -m lab report` -->", "<!-- /presets -->"
ROWS = (("tf-1m", "main", "RoPE + SwiGLU transformer"), ("ka-1m", "main", "Kuramoto attention, the paper's layer"),
        ("ka-1m-tuned", "main-tuned", "Kuramoto attention, our best 1M configuration on the torus"))
# shown once their groups have runs: the same layer on SU(2), the paper's non-abelian case (issue 25)
MEASURED_ROWS = (("ka-su2-1m", "main-su2", "the same layer on SU(2) (unit quaternions)"),
                 ("ka-su2-1m-tuned", "main-su2-tuned", "on SU(2) with the tuned recipe"))


def _cost(p: str) -> tuple[str, str]:
    """A preset's model FLOPs per token and its training tokens/s, each as a multiple of tf-1m's (tokens/s: the
    bench's side-by-side rates in the protocol's mode; "—" where the bench has no such row)."""
    if p == "tf-1m":
        return "1×", "1×"
    rates = bench_rates((p, "tf-1m"))
    speed = f"{rates[p] / rates['tf-1m']:.2f}×" if rates else "—"
    return f"{flops_per_token(p) / flops_per_token('tf-1m'):.2f}×", speed


def headline() -> str:
    runs = {p: seed_runs(g, p) for p, g, _ in (*ROWS, *MEASURED_ROWS)}
    if not runs["tf-1m"]:
        return "_No main runs yet: `python -m lab run lr`, then `python -m lab run main`._"
    tf = statistics.mean(r["eval_bpc"] for r in runs["tf-1m"])
    body = []
    for p, _, what in (*ROWS, *((p, g, w) for p, g, w in MEASURED_ROWS if runs[p])):
        vals = [r["eval_bpc"] for r in runs[p]]
        gap = "—" if p == "tf-1m" or not vals else f"{statistics.mean(vals) - tf:+.4f}"
        paper = PAPER_1M.get(p, "—")
        paper_gap = "—" if p != "ka-1m" else f"{float(paper.split()[0]) - float(PAPER_1M['tf-1m'].split()[0]):+.3f}"
        body.append([f"`{p}`", what, str(len(vals)), mean_sd(vals) if vals else "not run", gap, *_cost(p), paper,
                     paper_gap])
    return table(["preset", "", "seeds", "enwik7 test BPC", "gap", "FLOPs/token", "tokens/s", "paper (enwik8)",
                  "paper gap"], body) + (
        f"\n\n10M training tokens each, at each model's own swept learning rate (the transformer's mean {fmt(tf)}). "
        "FLOPs/token: model FLOPs per training token as a multiple of the transformer's (the bench's analytic count); "
        f"tokens/s: training throughput as a multiple of the transformer's, measured side by side in "
        f"`python -m benchmarks` ({' '.join(BENCH_MODE)}, on the CPU BENCHMARKS.md names)." + _longer())


def _gaps_at(at: dict[str, dict]) -> str:
    """tf-1m's test BPC at one budget, then each other preset's with its gap to it."""
    tf = at["tf-1m"]["eval_bpc"]
    return f"tf-1m {fmt(tf)}; " + ", ".join(f"{p} {fmt(r['eval_bpc'])} (gap {r['eval_bpc'] - tf:+.4f})"
                                            for p, r in at.items() if p != "tf-1m")


def _longer() -> str:
    """How the gaps move as training grows, at equal compute and with size (RESULTS.md's runs, where they exist): each
    curve preset at the largest budget (seed 0) and at the stretch budget (budget100), each Kuramoto preset at tf-1m's
    training FLOPs, and the 5M pair: a bullet each, after the table's paragraph."""
    runs = compute.budget_runs()
    longest = runs.get(f"{BUDGETS[-1] // 1_000_000}M", {})
    items: list[str] = []
    if "tf-1m" in longest and len(longest) > 1:
        tf = longest["tf-1m"]
        lower = [p for p, r in longest.items() if compute.off_rate(r)]
        rates = f", {' and '.join(lower)} at {'its' if len(lower) == 1 else 'their'} better rate there (lr40)" \
            if lower else ""
        items.append(f"Trained to {tf['tokens'] / 1e6:.0f}M tokens (seed 0, `python -m lab run budget40`{rates}): "
                     + _gaps_at(longest) + ".")
        leads = [r for r in with_twins("leads40")
                 if not flop_matched(r["name"]) and abs(r["tokens"] - tf["tokens"]) <= 0.1 * tf["tokens"]]
        if leads:  # the best structural change at that budget, chosen on validation, against the preset's best
            lead = min(leads, key=valid_estimate)
            own = longest.get("ka-1m-tuned")
            against = f"; Δ {lead['eval_bpc'] - own['eval_bpc']:+.4f} against ka-1m-tuned" if own else ""
            gap = lead["eval_bpc"] - tf["eval_bpc"]
            items.append("The best structural change of ka-1m-tuned there on validation (`python -m lab run "
                         f"leads40`): {lead['name']} {fmt(lead['eval_bpc'])} (gap {gap:+.4f}{against}).")
    stretch = runs.get(f"{STRETCH_BUDGET // 1_000_000}M", {})
    if "tf-1m" in stretch and len(stretch) > 1:
        tf = stretch["tf-1m"]
        items.append(f"To {tf['tokens'] / 1e6:.0f}M tokens (`python -m lab run budget100`, each at the rate best at "
                     f"{BUDGETS[-1] // 1_000_000}M): " + _gaps_at(stretch) + ".")
    flops = {r["name"]: r for r in with_twins("flops")}
    gaps = [f"{p} {eq['eval_bpc'] - tf['eval_bpc']:+.4f} at tf-1m's {b}-token FLOPs"
            for p in FLOPS_PRESETS for b, at in runs.items()
            if (tf := at.get("tf-1m")) and (eq := flops.get(f"{p}-flops-tf-{b.lower()}"))]
    if gaps:
        items.append("At equal training FLOPs instead of equal tokens (seed 0, `python -m lab run flops`), the gap "
                     "of " + "; ".join(gaps) + ".")
    if size.summary_row() is not None:  # both 5M presets have seeds
        items.append(size.summary_note().replace(f" In {size.MAIN_GROUP},",
                                                 f"At 5M parameters (`python -m lab run {size.MAIN_GROUP}`),"))
    return "\n\n" + "\n".join(f"- {item}" for item in items) if items else ""


def presets() -> str:
    """Every preset with its exact parameter count (embeddings included) and what it is."""
    body = [[f"`{r['name']}`", r["family"], f"{r['params']:,}", str(r["depth"]), str(r["width"]), str(r["heads"]),
             str(r["ff_hidden"]), r["what"]] for r in preset_table()]
    return table(["preset", "family", "params", "depth", "width", "heads", "ff hidden", "what"], body)


def update(readme: Path = Path("README.md")) -> Path | None:
    """Rewrite the tables between their markers; None (and nothing written) when the README has no markers."""
    if not readme.exists():
        return None
    text = new = readme.read_text()
    for start, end, body in ((START, END, headline), (PRESETS_START, PRESETS_END, presets)):
        pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
        new = pattern.sub(lambda _, s=start, e=end, b=body: f"{s}\n{b()}\n{e}", new)
    if START not in text and PRESETS_START not in text:
        return None
    readme.write_text(new)
    return readme
