"""Issue 26's structural leads on ka-1m-tuned (groups.LEADS) as tables: each at the protocol (group leads, seed 0)
against ka-1m-tuned's seed 0 and main-tuned's mean; every lead run at 40M tokens (leads40) against ka-1m-tuned at the
same rate and tf-1m at its best, and at tf-1m's 40M-token FLOPs against flops' ka-1m-tuned; the cheaper widths at
equal FLOPs (leads-flops); and what the 40M-token studies measured that the leads answer."""

import json
import math
import re
import statistics
from typing import Any

import torch

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.presets import build_model, get_preset
from lab import protocol
from lab.groups import (
    BUDGETS,
    LEAD_SEEDS,
    LEADS,
    WIDTHS,
    Lead,
    budget_best,
    flop_matched,
    flop_matched_tokens,
    lead_runs_at,
    plan,
    valid_estimate,
    with_twins,
)
from lab.protocol import PROTOCOL, load_results, run_command
from lab.retired import RETIRED_LEADS
from lab.writers import compute, gap_budget
from lab.writers.common import bpcs, diff, fmt, label, mean, mean_sd, not_run, overrides, saturation, seed_runs, table

PRESET, GROUP, LONG_GROUP, BASE_GROUP, BUDGET_GROUP = "ka-1m-tuned", "leads", "leads40", "main-tuned", "budget40"
SEEDS_GROUP, RATE_GROUP = "leads-seeds", "lr40"
WIDTHS_GROUP, FLOPS_GROUP = "leads-flops", "flops"  # the cheaper widths, and the preset at the same FLOPs
ALONG = (0.25, 0.5, 0.75, 1.0)  # where along a schedule the validation estimates are compared


def _base() -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """ka-1m-tuned's seed-0 run at the protocol (a twin of confirm's) and all of main-tuned's runs, twins included."""
    runs = seed_runs(BASE_GROUP, PRESET)
    return next((r for r in runs if r["train"]["seed"] == 0), None), runs


def _lead_rows() -> list[tuple[str, Lead, dict[str, Any] | None]]:
    """Each lead's planned name, its change and its result (None: not run yet), then the retired leads' (marked)."""
    done = {r["name"]: r for r in with_twins(GROUP)}
    return ([(f"{PRESET}-{k}", lead, done.get(f"{PRESET}-{k}")) for k, lead in LEADS.items()]
            + [(f"{r['name']} (retired)", Lead(r.get("model_overrides", {})), r) for g in RETIRED_LEADS
               for r in load_results(g)])


def _seed_vals(name: str, r: dict[str, Any] | None) -> list[float]:
    """A lead's test BPC on every seed run so far: its seed 0 (leads), then leads-seeds' runs of it."""
    more = sorted((x for x in load_results(SEEDS_GROUP) if x["name"].startswith(f"{name}-seed")),
                  key=lambda x: x["train"]["seed"])
    return bpcs(([r] if r else []) + more)


def _flops(lead: Lead, r: dict[str, Any] | None) -> str:
    # a lead's cost is known before it runs: the same count, from its preset and overrides
    return compute.costs(r or {"preset": PRESET, "model_overrides": lead.model, "train": {}, "tokens": 0})[0]


def _at_rate(lr: float, budget: int = BUDGETS[-1]) -> dict[str, Any] | None:
    """The preset's run at ``budget`` tokens and rate ``lr``: budget40's at its swept rate, lr40's below it."""
    return next((r for g in (BUDGET_GROUP, RATE_GROUP) for r in with_twins(g)
                 if r["preset"] == PRESET and not r.get("model_overrides") and r["train"]["lr"] == lr
                 and 0.9 * budget <= r["tokens"] <= 1.1 * budget), None)


def _flops_ref(budget: int = BUDGETS[-1]) -> dict[str, Any] | None:
    """flops' run of ka-1m-tuned at tf-1m's training FLOPs of ``budget`` tokens (the equal-FLOP leads' reference)."""
    return next((r for r in with_twins(FLOPS_GROUP) if r["name"] == f"{PRESET}-flops-tf-{budget // 1_000_000}m"), None)


def _reference(r: dict[str, Any]) -> dict[str, Any] | None:
    """A leads40 run's reference: the preset at the same FLOPs (flops), else at the same budget and rate."""
    if flop_matched(r["name"]):
        return _flops_ref(int(re.search(r"-flops-tf-(\d+)m$", r["name"])[1]) * 1_000_000)
    return _at_rate(r["train"]["lr"], r["tokens"])


def _along_label(tokens: int) -> str:
    return " / ".join(f"{f * tokens / 1e6:g}M" for f in ALONG)


def _along(r: dict[str, Any] | None, ref: dict[str, Any] | None) -> str:
    """A run's validation estimate minus the reference's at the schedule's quarters (within 5%, else —)."""
    if r is None or ref is None:
        return "—"
    own, base = dict(compute.valid_points(r)), dict(compute.valid_points(ref))
    shared, cells = sorted(set(own) & set(base)), []
    for at in (f * r["tokens"] for f in ALONG):
        t = min(shared, key=lambda x: abs(x - at), default=None)
        cells.append(f"{own[t] - base[t]:+.3f}" if t is not None and abs(t - at) <= 0.05 * at else "—")
    return " / ".join(cells)


def section() -> str:
    """The notebook's leads: at 10M, at 40M, at their best rates, and the cheaper widths."""
    seed0, base = _base()
    tuned = mean(bpcs(base))
    own = mean(bpcs(load_results(BASE_GROUP)))  # leads40's bar: main-tuned's own runs (not confirm's, which chose it)
    body = [[label(seed0) if seed0 else f"{PRESET} seed 0: {not_run(BASE_GROUP, 'not run yet')}", "(preset)",
             f"{seed0['params']:,}" if seed0 else "—", _flops(Lead({}), seed0), fmt(seed0 and seed0["eval_bpc"]), "—",
             diff(seed0, tuned), "—", "—", "—", saturation(seed0), ""],
            [f"{BASE_GROUP}, all {len(base)} seeds", "(preset)", "", "", mean_sd(bpcs(base)), "", "", "", "", "", "",
             ""],
            [f"{BASE_GROUP}, its own runs (leads40's bar)", "(preset)", "", "", fmt(own), "", "", "", "", "", "", ""]]
    for name, lead, r in _lead_rows():
        vals = _seed_vals(name, r)
        body.append([name, overrides(r) if r else lead.change(), f"{r['params']:,}" if r else "—", _flops(lead, r),
                     fmt(r["eval_bpc"]) if r else "not run", diff(r, seed0), diff(r, tuned),
                     f"{mean_sd(vals)} ({len(vals)})" if len(vals) > 1 else "—",
                     diff(mean(vals), tuned) if len(vals) > 1 else "—", _along(r, seed0), saturation(r),
                     "✓" * lead.at_budget])
    text = table(["lead", "change", "params", "model FLOPs/token", "test BPC", f"Δ vs {PRESET} seed 0",
                  f"Δ vs {BASE_GROUP} mean", f"over seeds {', '.join(map(str, (0, *LEAD_SEEDS)))}, mean ± sd (n)",
                  f"Δ of means vs {BASE_GROUP}", f"Δ validation vs seed 0 at {_along_label(PROTOCOL['tokens'])}",
                  "increments on the bound, attn / ff", "to 40M whatever its score"], body)
    if not any(r for *_, r in _lead_rows()):
        text += f"\n\n_{not_run(GROUP)}._"
    return "\n\n".join([text, _long_part(), _widths_part()])


def _long_part() -> str:
    """leads40's runs against the preset at the same tokens and rate (or FLOPs), and at their best rates."""
    rows = with_twins(LONG_GROUP)
    if not rows:
        try:
            names = ", ".join(s.name for s in plan(LONG_GROUP))
        except ConfigError as exc:  # no lead run yet, or none beat ka-1m-tuned: the plan's own computed reason
            return f"_At 40M tokens ({LONG_GROUP}): nothing to train yet: {exc}._"
        return f"_At 40M tokens ({LONG_GROUP}: {names}): {not_run(LONG_GROUP)}._"
    tf = budget_best("tf-1m", BUDGETS[-1])
    pairs = [(r, _reference(r)) for r in rows]
    body = [[label(r), overrides(r), f"{r['tokens'] / 1e6:.1f}M", fmt(r["eval_bpc"]), diff(r, ref), diff(r, tf),
             "—" if flop_matched(r["name"]) else _along(r, ref)] for r, ref in pairs]
    refs = {label(ref): ref for _, ref in pairs if ref}  # the references, once each, for their absolute numbers
    body += [[label(r), "(preset)" if r is not tf else "(the transformer)", f"{r['tokens'] / 1e6:.1f}M",
              fmt(r["eval_bpc"]), "—", diff(r, tf) if r is not tf else "—", "—"] for r in (*refs.values(), tf) if r]
    missing = sorted({f"{PRESET} at lr {r['train']['lr']:g}" for r, ref in pairs
                      if not flop_matched(r["name"]) and ref is None} | ({"tf-1m"} if tf is None else set()))
    text = table(["run", "change", "tokens", "test BPC", f"Δ vs {PRESET} at the same tokens and rate (or FLOPs)",
                  "gap to tf-1m at 40M", f"Δ validation vs {PRESET} at the same rate at {_along_label(BUDGETS[-1])}"],
                 body)
    if missing:
        text += (f"\n\n_Not in {BUDGET_GROUP} or {RATE_GROUP} yet: {', '.join(missing)} "
                 f"(`{run_command(BUDGET_GROUP)}`, `{run_command(RATE_GROUP)}`)._")
    if _flops_ref() is None and any(flop_matched(r["name"]) for r in rows):
        text += f"\n\n_Not in {FLOPS_GROUP} yet: {PRESET}-flops-tf-40m (`{run_command(FLOPS_GROUP)}`)._"
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if not flop_matched(r["name"]):
            runs.setdefault(re.sub(r"-lr-[^-]+$", "", r["name"]), []).append(r)
    best = [[f"{stem} (best rate)", f"{b['train']['lr']:g}", fmt(b["eval_bpc"]), label(ref), diff(b, ref),
             diff(valid_estimate(b), valid_estimate(ref))]
            for stem, own in runs.items() if len(own) > 1 and (ref := budget_best(PRESET, own[0]["tokens"]))
            for b in [min(own, key=valid_estimate)]]
    return text + ("\n\n" + table(["lead at several rates", "its best lr (validation)", "test BPC",
                                    "the preset at its best", "Δ test", "Δ validation"], best) if best else "")


def _widths_part() -> str:
    """leads-flops: each cheaper width at tf-1m's 10M-token training FLOPs, against the preset at the same FLOPs."""
    done = {r["name"]: r for r in with_twins(WIDTHS_GROUP)}
    ref, tf = _flops_ref(PROTOCOL["tokens"]), compute.budget_runs().get("10M", {}).get("tf-1m")
    body = []
    for name, lead in ((f"{PRESET}-{k}-flops-tf-10m", lead) for k, lead in WIDTHS.items()):
        r = done.get(name)
        tokens = r["tokens"] if r else flop_matched_tokens(PRESET, "tf-1m", PROTOCOL["tokens"], lead.model)
        body.append([name, overrides(r) if r else lead.change(), f"{r['params']:,}" if r else "—", _flops(lead, r),
                     f"{tokens / 1e6:.2f}M", compute.fmt_flops(compute.training_flops(r)),
                     fmt(r["eval_bpc"]) if r else "not run", diff(r, ref), diff(r, tf)])
    body += [[label(x), "(preset)" if x is ref else "(the transformer)", f"{x['params']:,}",
              compute.fmt_per_token(compute.flops_per_token(x)), f"{x['tokens'] / 1e6:.2f}M",
              compute.fmt_flops(compute.training_flops(x)), fmt(x["eval_bpc"]), "—" if x is ref else diff(x, ref),
              "—" if x is tf else diff(x, tf)] for x in (ref, tf) if x]
    note = "" if done else f"\n\n_{not_run(WIDTHS_GROUP)}._"
    return table(["cheaper width", "change", "params", "model FLOPs/token", "tokens", "training FLOPs", "test BPC",
                  f"Δ vs {PRESET}-flops-tf-10m", "gap to tf-1m"], body) + note


def why_table() -> str:
    """What the 40M-token studies measured that the leads answer (empty where their files are missing)."""
    gap_path, dyn_path = protocol.RESULTS / "gap-budget40.json", protocol.RESULTS / "dynamics.json"
    if not gap_path.exists() or not dyn_path.exists():
        return ""
    rows = [r for r in json.loads(dyn_path.read_text()) if r["run"] == f"budget40/{PRESET}-40m"]
    gap = json.loads(gap_path.read_text())
    if not rows or "slow_fraction" not in rows[0] or "tuned" not in gap.get("runs", {}):
        return ""
    model, context = build_model(*get_preset(PRESET)), PROTOCOL["context"]
    start = torch.cat([b.attn.omega.detach().abs() for b in model.blocks]).lt(2 * math.pi / context).float().mean()
    near, far = gap_budget.bins(gap)
    pooled, at_near, at_far, copying = gap_budget.cells(gap, "tuned")
    return table([f"{PRESET} after 40M tokens", "value"], [
        ["gap to tf-1m, pooled (bits per byte)", pooled], [f"gap at positions {near}", at_near],
        [f"gap at positions {far}", at_far], ["gap on the bytes copying predicts", copying],
        [f"oscillators slower than once per {context}-byte context, trained",
         f"{statistics.mean(rows[0]['slow_fraction']):.0%}"], ["the same at RoPE's start (initialisation)",
                                                               f"{start.item():.0%}"],
        ["attention increments on the bound", f"{statistics.mean(rows[0]['attn_saturation']):.0%}"]])


def summary_section() -> str:
    """RESULTS.md's leads: the preset and every lead run at 40M, at 10M and at 40M."""
    rows = _lead_rows()
    if not any(r for *_, r in rows):
        return (f"Planned ({', '.join(n.removeprefix(PRESET + '-') for n, _, _ in rows)}): "
                f"{not_run(GROUP, 'not run yet')}.")
    seed0, _ = _base()
    tf, ref, flops_ref, long = budget_best("tf-1m", BUDGETS[-1]), budget_best(PRESET, BUDGETS[-1]), _flops_ref(), \
        with_twins(LONG_GROUP)

    def cells(best: dict[str, Any] | None, flop: dict[str, Any] | None, base: bool) -> list[str]:
        at = "—" if best is None else fmt(best["eval_bpc"]) + f" ({'' if base else diff(best, ref) + ', '}lr " \
            f"{best['train']['lr']:g})"
        eq = "—" if flop is None else fmt(flop["eval_bpc"]) + ("" if base else f" ({diff(flop, flops_ref)})")
        return [at, eq, f"{diff(best, tf)} / {diff(flop, tf)}", compute.fmt_slope(best)]

    body = [[f"{PRESET} (the preset)", fmt(seed0 and seed0["eval_bpc"]), *cells(ref, flops_ref, True)]]
    for name, _, r in rows:  # the leads run at 40M (the notebook has those screened at 10M only)
        key = name.removeprefix(f"{PRESET}-")
        if not (mine := lead_runs_at(f"{PRESET}-{key}", BUDGETS[-1], long)):
            continue
        flop = next((x for x in long if x["name"] == f"{PRESET}-{key}-flops-tf-{BUDGETS[-1] // 1_000_000}m"), None)
        body.append([key, f"{fmt(r and r['eval_bpc'])} ({diff(r, seed0)})",
                     *cells(min(mine, key=valid_estimate), flop, False)])
    b, p = f"{BUDGETS[-1] // 1_000_000}M", f"{PROTOCOL['tokens'] // 1_000_000}M"
    try:
        plan(LONG_GROUP)
        at_long = "" if long else f" At {b}: {not_run(LONG_GROUP, 'not run yet')}."
    except ConfigError:  # none beat ka-1m-tuned and none is the budget's, or leads is not complete
        at_long = f" At {b}: none trained (the notebook says why)."
    return (table(["lead", f"{p}, seed 0 (Δ)", f"{b} tokens (Δ, lr)", f"tf-1m's {b} FLOPs (Δ)",
                   "gap to tf-1m, equal tokens / FLOPs", f"validation slope per doubling {p}→{b}"], body)
            + at_long)
