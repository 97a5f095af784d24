"""``kuramoto report RUN_DIR``: one self-contained HTML page about a trained run.

The page answers "did it train, and does it behave as the paper says?" without a notebook:
training/validation curves (any run), and for Kuramoto runs the dynamics of
``diagnostics.py``: local vs global order parameter against depth, learned ω against depth,
attention maps, phase portraits (quaternion portraits on SU(2)) and the sign of the value gates. Every image is a PNG
embedded as a base64 data URI (the page works offline, sent as one file, with no JS); the
PNGs and ``diagnostics.json`` are also written next to it for other uses.

Module import stays light (the CLI imports it to register the subcommand); torch and
matplotlib are imported when a report is made. Figures use matplotlib's object API
(``Figure`` renders with Agg), so no global pyplot state or display is involved.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kuramoto_attention.errors import ConfigError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from kuramoto_attention.diagnostics.measure import Diagnostics

MAX_MAP_TOKENS = 48  # attention maps show the first tokens (exact: causal rows only see earlier tokens)
PORTRAIT_COORDS = 3


def add_subcommand(sub: Any) -> None:
    p = sub.add_parser("report", help="HTML report of a run: curves and Kuramoto dynamics (order, ω, attention)")
    p.add_argument("run_dir")
    p.add_argument("--out", help="output folder (default RUN_DIR/report)")
    p.add_argument("--data-dir", help="folder holding the corpora (default: the run's, then $KURAMOTO_DATA)")
    p.add_argument("--batch", type=int, default=4, help="valid-split sequences to diagnose (default 4)")
    p.add_argument("--context", type=int, help="sequence length for diagnostics (default: the run's)")
    p.set_defaults(func=_cmd)


def _cmd(args: Any) -> None:
    print(write_report(args.run_dir, args.out, data_dir=args.data_dir, batch=args.batch, context=args.context))


# --------------------------------------------------------------------------- inputs
def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The records of metrics.jsonl; an unreadable line (e.g. cut by a crash) is skipped."""
    path = run_dir / "metrics.jsonl"
    records = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "step" in record:
                records.append(record)
    return records


def _run_info(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / "run.json").read_text())
    except FileNotFoundError:
        raise ConfigError(f"{run_dir} is not a run directory (no run.json); train one with `kuramoto train`") from None
    except json.JSONDecodeError:
        raise ConfigError(f"{run_dir / 'run.json'} is corrupt") from None


def byte_label(b: int) -> str:
    """A tick label for one byte: the character if printable, else an escape."""
    if b == 32:
        return "·"
    if b == 10:
        return "\\n"
    return chr(b) if 33 <= b < 127 else f"{b:02x}"


# --------------------------------------------------------------------------- figures
def _figure(w: float, h: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), dpi=100, layout="constrained")


def fig_curves(records: list[dict[str, Any]]) -> Figure:
    fig = _figure(7, 3.6)
    ax = fig.add_subplot()
    train = [(r.get("tokens", r["step"]), r["train_bpc"]) for r in records if r.get("train_bpc") is not None]
    valid = [(r.get("tokens", r["step"]), r["valid_bpc"]) for r in records if r.get("valid_bpc") is not None]
    if train:
        x, y = zip(*train, strict=True)
        ax.plot(x, y, lw=0.6, alpha=0.35, color="C0", label="train (per step)")
        ax.plot(x, _ema(list(y)), lw=1.5, color="C0", label="train (smoothed)")
    if valid:
        x, y = zip(*valid, strict=True)
        ax.plot(x, y, "o-", ms=3, color="C3", label="valid (estimate)")
    ax.set(xlabel="training tokens", ylabel="bits per byte", title="Training curves")
    ax.grid(alpha=0.3)
    if train or valid:
        ax.legend()
    return fig


def _ema(values: list[float], alpha: float = 0.1) -> list[float]:
    """Exponential moving average with bias correction: at step t the weighted mean of the values so far, weights
    ∝ (1 − α)^(t − s), so a short run's curve follows its values instead of lagging behind its first one."""
    out, acc = [], 0.0
    for t, v in enumerate(values, start=1):
        acc = (1 - alpha) * acc + alpha * v
        out.append(acc / (1 - (1 - alpha) ** t))
    return out


def fig_order(d: Diagnostics) -> Figure:
    fig = _figure(7, 3.4)
    ax = fig.add_subplot()
    layers = range(1, d.depth + 1)
    for h in range(d.heads):
        ax.plot(layers, d.local_order[:, h], "-", color="C0", alpha=0.25, lw=1)
        ax.plot(range(d.depth + 1), d.global_order[:, h], "-", color="C3", alpha=0.25, lw=1)
    ax.plot(layers, d.local_order.mean(1), "o-", color="C0", lw=2, label="local |G| (attended tokens)")
    ax.plot(range(d.depth + 1), d.global_order.mean(1), "s-", color="C3", lw=2, label="global (whole sequence)")
    ax.set(xlabel="layer (0 = embedding)", ylabel="order parameter", ylim=(0, 1.02), title="Synchronisation vs depth")
    ax.set_xticks(range(d.depth + 1))
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def fig_omega(d: Diagnostics) -> Figure:
    import torch

    fig = _figure(7, 3.6)
    ax = fig.add_subplot()
    abs_omega = d.omega.abs().flatten(1)  # (L, k)
    positive = abs_omega[abs_omega > 0]
    log = positive.numel() > 0
    floor = float(positive.min()) if log else 0.0
    gen = torch.Generator().manual_seed(0)
    for i in range(d.depth):
        jitter = (torch.rand(abs_omega.shape[1], generator=gen) - 0.5) * 0.3
        ax.scatter(i + 1 + jitter, abs_omega[i].clamp_min(floor), s=8, alpha=0.45, color="C0")
    ax.plot(range(1, d.depth + 1), d.layer_median_abs_omega.clamp_min(floor), "D-", color="C3", lw=2,
            label="median |ω|")
    if log:
        ax.set_yscale("log")
        sec = ax.secondary_yaxis("right", functions=(_timescale, _timescale))
        sec.set_ylabel("timescale 2π/|ω| (tokens)")
    ax.set(xlabel="layer", ylabel="|ω| (radians per token)", title="Learned drift rates ω")
    ax.set_xticks(range(1, d.depth + 1))
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def _timescale(x: Any) -> Any:
    import numpy as np

    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore"):
        return 2 * math.pi / np.where(x > 0, x, np.nan)


def fig_attention(d: Diagnostics) -> Figure:
    n = min(d.tokens.shape[1], MAX_MAP_TOKENS)
    labels = [byte_label(b) for b in d.tokens[0, :n].tolist()]
    layers = sorted({0, d.depth - 1})
    heads = sorted({0, d.heads - 1})
    fig = _figure(3.4 * len(heads) + 0.6, 3.4 * len(layers))
    axes = fig.subplots(len(layers), len(heads), squeeze=False)
    for r, layer in enumerate(layers):
        for c, head in enumerate(heads):
            ax = axes[r][c]
            im = ax.imshow(d.attention[layer][0, head, :n, :n].numpy(), cmap="viridis", vmin=0, vmax=1)
            ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=9)
            ax.set_xticks(range(n), labels, fontsize=5, family="monospace")
            ax.set_yticks(range(n), labels, fontsize=5, family="monospace")
            ax.set(xlabel="key u", ylabel="query t")
    fig.colorbar(im, ax=axes, shrink=0.6, label="A[t, u]")
    return fig


def _portrait_grid(d: Diagnostics, oscillators: int) -> tuple[list[int], list[int], Figure, Any]:
    """The portraits' grid: up to PORTRAIT_COORDS oscillators (rows) by up to 4 states, embedding to last layer."""
    coords = sorted({round(i * (oscillators - 1) / max(PORTRAIT_COORDS - 1, 1)) for i in range(PORTRAIT_COORDS)})
    cols = sorted({round(i * d.depth / 3) for i in range(4)})
    fig = _figure(2.1 * len(cols) + 0.8, 2.1 * len(coords))
    return coords, cols, fig, fig.subplots(len(coords), len(cols), squeeze=False)


def fig_phases(d: Diagnostics) -> Figure:
    import numpy as np

    coords, cols, fig, axes = _portrait_grid(d, d.states[0].shape[-1])
    circle = np.linspace(0, 2 * math.pi, 200)
    t = d.tokens.shape[1]
    for r, j in enumerate(coords):
        for c, s in enumerate(cols):
            ax = axes[r][c]
            theta = d.states[s][0, :, j].numpy()
            ax.plot(np.cos(circle), np.sin(circle), color="0.8", lw=0.8)
            sc = ax.scatter(np.cos(theta), np.sin(theta), c=np.arange(t), cmap="plasma", s=10, vmin=0, vmax=t - 1)
            z = np.exp(1j * theta).mean()
            ax.annotate("", (z.real, z.imag), (0, 0), arrowprops=dict(arrowstyle="->", color="k", lw=1.2))
            ax.set(xlim=(-1.15, 1.15), ylim=(-1.15, 1.15), aspect="equal", xticks=[], yticks=[])
            ax.set_title(f"coord {j}, {'embedding' if s == 0 else f'after layer {s}'}", fontsize=8)
    fig.colorbar(sc, ax=axes, shrink=0.6, label="token position")
    return fig


def fig_quaternions(d: Diagnostics) -> Figure:
    """The SU(2) analogue of the phase portraits: each oscillator's T unit quaternions seen in the plane of their mean
    direction m̂ (x axis: ⟨q, m̂⟩) and of the leading direction of what is left (y axis), so every point lies in the
    unit disc, a synchronised cluster sits near (1, 0), and the arrow, (|mean_t q_t|, 0), is that oscillator's order
    parameter."""
    import numpy as np

    coords, cols, fig, axes = _portrait_grid(d, d.states[0].shape[-2])
    circle = np.linspace(0, 2 * math.pi, 200)
    t = d.tokens.shape[1]
    noun = "quaternion" if d.group == "su2" else "oscillator"  # the sphere's unit vectors are drawn alike
    for r, j in enumerate(coords):
        for c, s in enumerate(cols):
            ax = axes[r][c]
            q = d.states[s][0, :, j].double().numpy()  # (T, 4)
            mean = q.mean(axis=0)
            size = float(np.linalg.norm(mean))
            m_hat = mean / size if size > 1e-12 else np.eye(q.shape[-1])[0]
            along = q @ m_hat
            rest = q - along[:, None] * m_hat
            lead = np.linalg.svd(rest, full_matrices=False)[2][0] if t > 1 else np.eye(q.shape[-1])[1]
            ax.plot(np.cos(circle), np.sin(circle), color="0.8", lw=0.8)
            sc = ax.scatter(along, rest @ lead, c=np.arange(t), cmap="plasma", s=10, vmin=0, vmax=max(t - 1, 1))
            ax.annotate("", (size, 0.0), (0, 0), arrowprops=dict(arrowstyle="->", color="k", lw=1.2))
            ax.set(xlim=(-1.15, 1.15), ylim=(-1.15, 1.15), aspect="equal", xticks=[], yticks=[])
            ax.set_title(f"{noun} {j}, {'embedding' if s == 0 else f'after layer {s}'}", fontsize=8)
    fig.colorbar(sc, ax=axes, shrink=0.6, label="token position")
    return fig


def fig_value_gates(d: Diagnostics) -> Figure:
    fig = _figure(7, 3.4)
    ax = fig.add_subplot()
    hist = d.value_gate_histogram()
    for i, counts in enumerate(hist["counts"]):
        total = max(sum(counts), 1)
        ax.stairs([c / total for c in counts], hist["edges"], lw=1.5,
                  label=f"layer {i + 1}: {d.sync_fraction[i].mean():.0%} sync")
    ax.axvline(0, color="k", lw=0.8, ls="--")
    ax.set(xlabel="value gate v (v > 0 synchronises, v < 0 repels)", ylabel="fraction", title="Coupling signs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


# --------------------------------------------------------------------------- page
CAPTIONS = {
    "curves": "Look for: both curves falling and the validation estimate tracking the training curve "
              "(a widening gap means overfitting).",
    "order": "Look for (paper §4): local coherence |G| near 1 at every layer while the global order parameter "
             "falls with depth: local synchronisation without global collapse.",
    "omega": "Look for (paper §4): median |ω| falling with depth, i.e. longer timescales (right axis) in later "
             "layers: early layers couple short-range, later ones long-range.",
    "attention": "Coupling matrices A for the first tokens of a validation sample (first/last layer and head); "
                 "look for local diagonals early and sparse long-range links later (· = space).",
    "phases": "Each dot is one token's oscillator e^{iθ} (colour = position), the arrow the mean; look for "
              "clusters (partial synchrony) rather than one point (collapse) or a uniform ring (no order).",
    "quaternions": "Each dot is one token's unit quaternion (colour = position) in the plane of the oscillator's "
                   "mean direction (x) and the leading direction of the rest (y); the arrow is |mean|. Look for "
                   "clusters (partial synchrony) rather than one point (collapse) or an even spread (no order).",
    "value_gates": "Look for: mostly positive gates (synchronising coupling); a negative tail shows coordinates "
                   "the model uses to repel, i.e. to keep tokens apart.",
}


def _png(fig: Figure, path: Path) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    data = buf.getvalue()
    path.write_bytes(data)
    return base64.b64encode(data).decode("ascii")


def _fmt(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–" if x is None or math.isnan(x) else "∞"
    return f"{x:.3g}" if isinstance(x, float) else html.escape(str(x))


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(v)}</td>" for v in row) + "</tr>" for row in rows)
    # wide tables (one column per layer and measure) scroll inside the page instead of being cut off
    return f"<div style=\"overflow-x:auto\"><table><tr>{head}</tr>{body}</table></div>"


def _layer_table(d: Diagnostics) -> str:
    header = ["layer", "local |G|", "global after", "entropy (nats)", "distance (tokens)", "self A_tt", "v > 0",
              "median |ω|", "timescale (tokens)", "attn saturated", "ff saturated", "attn drive", "ff drive",
              "ΔBPC without attn", "ΔBPC without ff"]
    rows = [[i + 1, float(d.local_order[i].mean()), float(d.global_order[i + 1].mean()), float(d.entropy[i].mean()),
             float(d.distance[i].mean()), float(d.self_weight[i].mean()), float(d.sync_fraction[i].mean()),
             float(d.layer_median_abs_omega[i]),
             float(d.layer_timescale[i]), float(d.attn_saturation[i]), float(d.ff_saturation[i]),
             float(d.attn_drive[i]), float(d.ff_drive[i]), float(d.knockout_bpc[i, 0]), float(d.knockout_bpc[i, 1])]
            for i in range(d.depth)]
    return _table(header, rows)


STYLE = ("body{font-family:sans-serif;max-width:960px;margin:2em auto;padding:0 1em;color:#222}"
         "table{border-collapse:collapse;margin:1em 0;font-size:90%}td,th{border:1px solid #ccc;padding:3px 8px;"
         "text-align:right}figure{margin:2em 0}img{max-width:100%}figcaption{color:#555;font-size:90%}")


def write_report(run_dir: str | Path, out: str | Path | None = None, *, data_dir: str | None = None,
                 batch: int = 4, context: int | None = None) -> Path:
    """Write ``report.html``, one PNG per figure and (Kuramoto runs) ``diagnostics.json`` into ``out``
    (default RUN_DIR/report); returns the page's path."""
    run_dir = Path(run_dir)
    info = _run_info(run_dir)
    out = Path(out) if out is not None else run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    family = info.get("model", {}).get("family", "?")
    records = read_metrics(run_dir)
    figures: list[tuple[str, Figure]] = [("curves", fig_curves(records))]
    notes, tables = [], []
    if family == "kuramoto":
        from kuramoto_attention.diagnostics.measure import diagnose_run

        d = diagnose_run(run_dir, batch=batch, context=context, data_dir=data_dir)
        d.to_json(out / "diagnostics.json")
        figures += [("order", fig_order(d)), ("omega", fig_omega(d)), ("attention", fig_attention(d)),
                    ("phases", fig_phases(d)) if d.group == "torus" else ("quaternions", fig_quaternions(d)),
                    ("value_gates", fig_value_gates(d))]
        b, t = d.tokens.shape
        tables.append(f"<h2>Dynamics per layer</h2><p>Means over heads, on {b} validation sequences of {t} bytes "
                      f"(bound: {html.escape(d.bound)}; saturated: increment ≥ 95% of the radius; drive: the median "
                      f"argument of the bound's tanh, past about 2 a step's length no longer follows the layer). "
                      f"Full numbers: <a href=\"diagnostics.json\">diagnostics.json</a>.</p>{_layer_table(d)}")
    else:
        notes.append(f"This is a {html.escape(family)} run: only the training curves apply (dynamics diagnostics "
                     "need a Kuramoto model).")
    last = records[-1] if records else {}
    valid = [r["valid_bpc"] for r in records if r.get("valid_bpc") is not None]
    summary = _table(["family", "steps", "tokens", "last train bpc", "last valid bpc", "corpus"],
                     [[family, last.get("step", 0), last.get("tokens", 0), last.get("train_bpc"),
                       valid[-1] if valid else None, info.get("train", {}).get("corpus", "?")]])
    parts = []
    for name, fig in figures:
        data = _png(fig, out / f"{name}.png")
        parts.append(f'<figure><img alt="{name}" src="data:image/png;base64,{data}">'
                     f"<figcaption>{html.escape(CAPTIONS[name])}</figcaption></figure>")
    title = f"Kuramoto report: {run_dir.name}"
    page = (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>{summary}"
            + "".join(f"<p>{n}</p>" for n in notes) + parts[0] + "".join(tables) + "".join(parts[1:])
            + "</body></html>\n")
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
