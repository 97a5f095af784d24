"""Where the Kuramoto model loses to the transformer: the per-byte loss gap, broken down (RESULTS.md).

``python -m lab gap [GROUP]`` (default: main) loads each seed's ka-1m and tf-1m runs of the group (a group
of ka-1m runs only, such as main-unprojected, against main's tf-1m runs),
scores both on the same validation windows (evenly spaced, ``diagnostics.valid_batch``; float32) and
writes ``results/gap.json`` and ``results/gap.md``:

* by position in the window: is the gap a long-context effect (growing with t) or local (flat)?
* by how predictable the byte is: bytes grouped by the transformer's own loss (its quartiles).

Where group confirm holds ``GAP_VARIANT`` on the same seeds (the preset ka-1m-tuned, outside the paper), it gets a
column too: what is left of the gap once the variant has closed part of it.
"""

import itertools
import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from kuramoto_attention.errors import ConfigError
from lab import protocol
from lab.groups import TUNED_CANDIDATE
from lab.protocol import load_results
from lab.studies import missing_runs

POSITION_EDGES = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)  # bins [a, b) of the position t in the window
WINDOWS = 64
GAP_VARIANT = TUNED_CANDIDATE  # ka-1m-tuned: confirm's runs of it are main-tuned's seeds 0-2


def bits_per_byte(model: Any, windows: Tensor) -> Tensor:
    """Per-byte loss in bits of predicting windows[:, 1:] from windows[:, :-1]: (B, T − 1), float32."""
    model = model.float().eval()
    with torch.no_grad():
        logits = model(windows[:, :-1]).float()
    nats = torch.nn.functional.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten(), reduction="none")
    return (nats / math.log(2)).view(windows.shape[0], -1)


def _means(bits: dict[str, Tensor], sel: Any) -> dict[str, float]:
    """Each model's mean bits over the selection, and each Kuramoto model's gap to the transformer ("tf")."""
    out = {name: b[sel].mean().item() for name, b in bits.items()}
    return {**out, **{f"{name}_gap": v - out["tf"] for name, v in out.items() if name != "tf"}}


def by_position(bits: dict[str, Tensor], edges: tuple[int, ...] = POSITION_EDGES) -> list[dict[str, float]]:
    """Mean bits of each model and the gaps per position bin [a, b); bits: model name -> (B, T), "tf" among them."""
    rows = []
    length = bits["tf"].shape[1]
    for a, b in itertools.pairwise(edges):
        if a >= length:
            break
        rows.append({"from": a, "to": min(b, length), **_means(bits, (slice(None), slice(a, b)))})
    return rows


def by_difficulty(bits: dict[str, Tensor]) -> list[dict[str, float]]:
    """The same per quartile of the transformer's per-byte loss (quartile 0: the bytes it predicts best)."""
    flat = {name: b.flatten() for name, b in bits.items()}
    cuts = torch.quantile(flat["tf"], torch.tensor([0.25, 0.5, 0.75], dtype=flat["tf"].dtype))
    quartile = torch.bucketize(flat["tf"], cuts)
    return [{"quartile": q, "bytes": int((quartile == q).sum()), **_means(flat, quartile == q)} for q in range(4)]


def measure(group: str, data_dir: str | None, windows: int = WINDOWS) -> dict[str, Any]:
    from kuramoto_attention.diagnostics.measure import valid_batch
    from kuramoto_attention.training.checkpoint import load_model
    from lab.records import run_dir_of, with_twins

    done = {r["name"]: r for r in with_twins(group)}  # main's ka-1m may be another group's identical run
    if not any(r["family"] == "transformer" for r in done.values()):  # a frozen ka-1m group: main's transformer
        done |= {r["name"]: r for r in load_results("main") if r["family"] == "transformer"}
    names = set(done)
    seeds = sorted(int(n.rsplit("seed", 1)[1]) for n in names
                   if n.startswith("ka-1m-seed") and n.replace("ka-", "tf-", 1) in names)
    if not seeds:
        raise ConfigError(f"no seed with both ka-1m and tf-1m in {protocol.RESULTS / group}; "
                          f"run `{protocol.run_command(group)}` first")
    confirmed = {r["name"] for r in load_results("confirm")}
    variant_runs = {s: protocol.RUNS / "confirm" / (f"ka-{GAP_VARIANT}" + (f"-seed{s}" if s else "")) for s in seeds}
    with_variant = group == "main" and all(run.name in confirmed for run in variant_runs.values())
    bits: dict[str, list[Tensor]] = {"ka": [], "tf": [], **({"variant": []} if with_variant else {})}
    by_seed = {seed: {"ka": run_dir_of(done[f"ka-1m-seed{seed}"]), "tf": run_dir_of(done[f"tf-1m-seed{seed}"]),
                      **({"variant": variant_runs[seed]} if with_variant else {})} for seed in seeds}
    missing_runs([run for runs in by_seed.values() for run in runs.values()], f"gap {group}")
    for runs in by_seed.values():
        context = json.loads((runs["ka"] / "run.json").read_text())["train"]["context"]
        batch = valid_batch(runs["ka"], windows, context + 1, data_dir)  # every model sees the same windows
        for name, run in runs.items():
            bits[name].append(bits_per_byte(load_model(run)[0], batch))
    pooled = {name: torch.cat(b) for name, b in bits.items()}
    return {"group": group, "seeds": seeds, "windows_per_seed": windows, "context": pooled["tf"].shape[1],
            "ka_ff_proj": done[f"ka-1m-seed{seeds[0]}"]["model"].get("ff_proj", "none"),
            "variant_name": GAP_VARIANT if with_variant else None, **{n: b.mean().item() for n, b in pooled.items()},
            "by_position": by_position(pooled), "by_difficulty": by_difficulty(pooled)}


def write(res: dict[str, Any]) -> Path:
    (protocol.RESULTS / "gap.json").write_text(json.dumps(res, indent=1) + "\n")
    seeds = ", ".join(map(str, res["seeds"]))
    variant = res.get("variant_name")
    models = ["ka", *(["variant"] if variant else []), "tf"]
    cols = ["ka", *(["variant"] if variant else []), "tf", "gap", *(["variant gap"] if variant else [])]

    def cells(r: dict[str, Any]) -> str:
        gaps = [r["ka_gap"], *([r["variant_gap"]] if variant else [])]
        return " | ".join([*(f"{r[m]:.3f}" for m in models), *(f"{g:+.3f}" for g in gaps)])

    pooled = ", ".join(f"{m} {res[m]:.3f}" for m in models)
    lines = [
        "## Where the gap is: per-byte loss of ka-1m against tf-1m",
        "",
        f"_Generated by `python -m lab gap {res['group']}`: the models of seeds {seeds} on the same "
        f"{res['windows_per_seed']} evenly spaced validation windows of {res['context']} predicted bytes each, "
        f"float32; bits per byte, pooled over seeds ({pooled}; gap {res['ka'] - res['tf']:+.3f}"
        + (f", variant gap {res['variant'] - res['tf']:+.3f}" if variant else "") + ")."
        + (f" variant: ka-1m with {variant} (group confirm, the same seeds), i.e. the preset ka-1m-tuned, "
           "outside the paper." if variant else "") + "_",
        "",
        "| position t in the window | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for r in res["by_position"]:
        where = str(r["from"]) if r["to"] - r["from"] == 1 else f"{r['from']}–{r['to'] - 1}"
        lines.append(f"| {where} | {cells(r)} |")
    lines += ["", "| bytes by the transformer's loss | bytes | " + " | ".join(cols) + " |",
              "|---|---|" + "---|" * len(cols)]
    names = ("easiest quarter", "second", "third", "hardest quarter")
    for r in res["by_difficulty"]:
        lines.append(f"| {names[r['quartile']]} | {r['bytes']:,} | {cells(r)} |")
    path = protocol.RESULTS / "gap.md"
    path.write_text("\n".join([*lines, ""]))
    return path
