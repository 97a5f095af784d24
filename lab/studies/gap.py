"""Where ka loses to tf (``python -m lab gap [GROUP]``): the per-byte gap by position, difficulty and recall."""

import itertools
import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from kuramoto_attention.errors import ConfigError
from lab import protocol
from lab.groups import TUNED_CANDIDATE, flop_matched
from lab.protocol import load_results
from lab.studies import missing_runs, save

POSITION_EDGES = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)  # bins [a, b) of the position t in the window
WINDOWS = 64
RECALL_ORDER = 4  # bytes of context whose earlier occurrence in the window makes a byte "seen"
RECALL_NAMES = ("context new to the window", "seen, copying predicts the byte", "seen, copying predicts another byte")
BUDGET_PAIR = {"budget40": {"tuned": "ka-1m-tuned-40m", "su2": "ka-su2-1m-tuned-40m", "ka": "ka-1m-40m",
                            "tf": "tf-1m-40m"}}
LEADS_AT_BUDGET = {"budget40": "leads40"}  # the group whose runs (the leads at that budget) join the study as "lead"
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


def recall_classes(windows: Tensor, order: int = RECALL_ORDER) -> Tensor:
    """(B, T − 1) 0 where its ``order`` bytes of context are new, 1 where copying predicts it, 2 else."""
    rows = windows.tolist()
    out = torch.zeros(windows.shape[0], windows.shape[1] - 1, dtype=torch.long)
    for b, row in enumerate(rows):
        latest: dict[tuple[int, ...], int] = {}  # k-gram -> the byte that followed its latest occurrence
        for t in range(order - 1, len(row) - 1):
            key = tuple(row[t - order + 1:t + 1])
            if key in latest:
                out[b, t] = 1 if latest[key] == row[t + 1] else 2
            latest[key] = row[t + 1]
    return out


def by_recall(bits: dict[str, Tensor], classes: Tensor) -> list[dict[str, Any]]:
    """Mean bits and gaps per recall class (``recall_classes``); classes with no bytes are left out."""
    flat = {name: b.flatten() for name, b in bits.items()}
    cls = classes.flatten()
    return [{"recall": c, "bytes": int((cls == c).sum()), **_means(flat, cls == c)}
            for c in range(len(RECALL_NAMES)) if (cls == c).any()]


def measure(group: str, data_dir: str | None, windows: int = WINDOWS) -> dict[str, Any]:
    if group in BUDGET_PAIR:
        return measure_budget(group, data_dir, windows)
    from kuramoto_attention.diagnostics.measure import valid_batch
    from kuramoto_attention.training.checkpoint import load_model
    from lab.groups import with_twins
    from lab.records import run_dir_of

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
    classes = []
    for runs in by_seed.values():
        context = json.loads((runs["ka"] / "run.json").read_text())["train"]["context"]
        batch = valid_batch(runs["ka"], windows, context + 1, data_dir)  # every model sees the same windows
        classes.append(recall_classes(batch))
        for name, run in runs.items():
            bits[name].append(bits_per_byte(load_model(run)[0], batch))
    pooled = {name: torch.cat(b) for name, b in bits.items()}
    return {"group": group, "seeds": seeds, "windows_per_seed": windows, "context": pooled["tf"].shape[1],
            "ka_ff_proj": done[f"ka-1m-seed{seeds[0]}"]["model"].get("ff_proj", "none"),
            "variant_name": GAP_VARIANT if with_variant else None, **{n: b.mean().item() for n, b in pooled.items()},
            "by_position": by_position(pooled), "by_difficulty": by_difficulty(pooled),
            "by_recall": by_recall(pooled, torch.cat(classes))}


def measure_budget(group: str, data_dir: str | None, windows: int = WINDOWS) -> dict[str, Any]:
    """The budget group's Kuramoto runs against its transformer, seed 0, on ``windows`` validation windows."""
    from kuramoto_attention.diagnostics.measure import valid_batch
    from kuramoto_attention.training.checkpoint import load_model
    from lab.groups import with_twins
    from lab.records import run_dir_of

    done = {r["name"]: r for r in with_twins(group)}
    names = {key: name for key, name in BUDGET_PAIR[group].items() if name in done}
    leads = sorted((r for r in with_twins(LEADS_AT_BUDGET[group]) if not flop_matched(r["name"])),
                   key=lambda r: r["eval_bpc"])  # the best lead at the budget itself, if trained
    if leads:
        done[leads[0]["name"]] = leads[0]
        names = {"lead": leads[0]["name"], **names}
    if "tf" not in names or len(names) < 2:
        raise ConfigError(f"gap {group} needs {BUDGET_PAIR[group]['tf']} and a Kuramoto run of results/{group}; "
                          f"run `{protocol.run_command(group)}` first")
    runs = {key: run_dir_of(done[name]) for key, name in names.items()}
    missing_runs(list(runs.values()), f"gap {group}")
    context = json.loads((runs["tf"] / "run.json").read_text())["train"]["context"]
    batch = valid_batch(runs["tf"], windows, context + 1, data_dir)
    bits = {key: bits_per_byte(load_model(run)[0], batch) for key, run in runs.items()}
    return {"group": group, "runs": names, "windows": windows, "context": context,
            "tokens": {key: done[name]["tokens"] for key, name in names.items()},
            **{key: b.mean().item() for key, b in bits.items()},
            "by_position": by_position(bits), "by_difficulty": by_difficulty(bits),
            "by_recall": by_recall(bits, recall_classes(batch))}


def write(res: dict[str, Any]) -> Path:
    """results/gap.json (main's seeds), or results/gap-GROUP.json (a budget group's seed 0)."""
    return save(f"gap-{res['group']}.json" if "runs" in res else "gap.json", res)
