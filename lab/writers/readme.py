"""README.md's generated tables, each written between two markers so that the README's figures, like RESULTS.md's,
come from a command (``python -m lab report``): the headline (the 1M comparison on enwik7 beside the paper's numbers,
from results/) and the presets (their exact parameter counts, from ``models.presets.preset_table``)."""

import re
from pathlib import Path

from kuramoto_attention.models.presets import preset_table
from lab.groups import flops_per_token
from lab.writers.common import bpcs, diff, mean, mean_sd, seed_runs, table
from lab.writers.compute import bench_rates
from lab.writers.summary import PAPER_1M

START, END = "<!-- headline: written by `python -m lab report` -->", "<!-- /headline -->"
PRESETS_START, PRESETS_END = "<!-- presets: written by `python -m lab report` -->", "<!-- /presets -->"
ROWS = (("tf-1m", "main", "RoPE + SwiGLU transformer"), ("ka-1m", "main", "Kuramoto attention, the paper's layer"),
        ("ka-1m-tuned", "main-tuned", "Kuramoto attention, our best 1M configuration on the torus"))
# shown once their groups have runs: the same layer on SU(2), the paper's non-abelian case (issue 25)
MEASURED_ROWS = (("ka-su2-1m", "main-su2", "the same layer on SU(2) (unit quaternions)"),
                 ("ka-su2-1m-tuned", "main-su2-tuned", "on SU(2) with the tuned recipe"))


def _cost(p: str) -> tuple[str, str]:
    """A preset's model FLOPs per token and bench tokens/s, as multiples of tf-1m's."""
    if p == "tf-1m":
        return "1×", "1×"
    rates = bench_rates((p, "tf-1m"))
    speed = f"{rates[p] / rates['tf-1m']:.2f}×" if rates else "—"
    return f"{flops_per_token(p) / flops_per_token('tf-1m'):.2f}×", speed


def headline() -> str:
    runs = {p: seed_runs(g, p) for p, g, _ in (*ROWS, *MEASURED_ROWS)}
    if not runs["tf-1m"]:
        return "_No main runs yet: `python -m lab run lr`, then `python -m lab run main`._"
    tf = mean(bpcs(runs["tf-1m"]))
    body = []
    for p, _, what in (*ROWS, *((p, g, w) for p, g, w in MEASURED_ROWS if runs[p])):
        paper = PAPER_1M.get(p, "—")
        paper_gap = "—" if p != "ka-1m" else f"{float(paper.split()[0]) - float(PAPER_1M['tf-1m'].split()[0]):+.3f}"
        body.append([f"`{p}`", what, str(len(runs[p])), mean_sd(bpcs(runs[p])) if runs[p] else "not run",
                     "—" if p == "tf-1m" else diff(mean(bpcs(runs[p])), tf), *_cost(p), paper, paper_gap])
    return table(["preset", "", "seeds", "enwik7 test BPC", "gap", "FLOPs/token", "tokens/s", "paper (enwik8)",
                  "paper gap"], body)


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
