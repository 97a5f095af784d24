"""Issue 26's structural leads on ka-1m-tuned (groups.LEADS: fields of its own code path, such as the coupling's
higher harmonics) in the notebook and the summary: each at the protocol (group leads, seed 0) against the same run
without it (ka-1m-tuned's seed 0, a twin of confirm's run of the candidate) and against main-tuned's mean over all
its seeds; then every lead that beat it, and every lead whose reason is the budget, at 40M tokens (leads40) against
ka-1m-tuned at the same rate (budget40's, lr40's) and tf-1m at its best, and at tf-1m's 40M-token training FLOPs
against flops' ka-1m-tuned there."""

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
    TUNED_CANDIDATE,
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
from lab.writers import gap_budget
from lab.writers.common import fmt, label, mean_sd, not_run, overrides, seed_runs, table
from lab.writers.compute import (
    budget_runs,
    flops_per_token,
    fmt_flops,
    fmt_per_token,
    fmt_slope,
    training_flops,
    valid_points,
)

PRESET, GROUP, LONG_GROUP, BASE_GROUP, BUDGET_GROUP = "ka-1m-tuned", "leads", "leads40", "main-tuned", "budget40"
SEEDS_GROUP, RATE_GROUP = "leads-seeds", "lr40"
WIDTHS_GROUP, FLOPS_GROUP = "leads-flops", "flops"  # the cheaper widths, and the preset at the same FLOPs
FLOPS_REF = f"{PRESET}-flops-tf-{PROTOCOL['tokens'] // 1_000_000}m"  # the preset at tf-1m's 10M-token FLOPs


def _base() -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """ka-1m-tuned's seed-0 run at the protocol (main-tuned's, or confirm's identical run as its twin) and all of
    main-tuned's runs, twins included."""
    runs = seed_runs(BASE_GROUP, PRESET)
    return next((r for r in runs if r["train"]["seed"] == 0), None), runs


def _lead_rows() -> list[tuple[str, Lead, dict[str, Any] | None]]:
    """Each lead's planned name, its change, and its result (None: not run yet), in LEADS' order, then the retired
    leads' (their fields left the library: their recorded change, marked)."""
    done = {r["name"]: r for r in with_twins(GROUP)}
    return ([(f"{PRESET}-{k}", lead, done.get(f"{PRESET}-{k}")) for k, lead in LEADS.items()]
            + [(f"{r['name']} (retired)", Lead(r.get("model_overrides", {})), r) for g in RETIRED_LEADS
               for r in load_results(g)])


def _seed_vals(name: str, r: dict[str, Any] | None) -> list[float]:
    """A lead's test BPC on every seed run so far: its seed 0 (leads), then leads-seeds' runs of it."""
    more = sorted((x for x in load_results(SEEDS_GROUP) if x["name"].startswith(f"{name}-seed")),
                  key=lambda x: x["train"]["seed"])
    return [x["eval_bpc"] for x in ([r] if r else []) + more]


def _over_seeds(vals: list[float], mean: float | None) -> tuple[str, str] | None:
    """(mean ± sd over the seeds, Δ of that mean against main-tuned's mean), or None until a second seed exists."""
    if len(vals) < 2:
        return None
    return mean_sd(vals), f"{statistics.mean(vals) - mean:+.4f}" if mean is not None else "—"


def _seeds_cells(vals: list[float], mean: float | None) -> list[str]:
    seeds = _over_seeds(vals, mean)
    return [f"{seeds[0]} ({len(vals)})", seeds[1]] if seeds else ["—", "—"]


def _flops(lead: Lead, r: dict[str, Any] | None) -> str:
    # a lead's cost is known before it runs: the same count, from its preset and overrides
    return fmt_per_token(flops_per_token(r or {"preset": PRESET, "model_overrides": lead.model, "train": {}}))


def _on_bound(r: dict[str, Any] | None) -> str:
    """The share of attention / feed-forward increments on the norm bound, mean over layers (the run's diagnostics):
    what a lead changed in how far each step moves."""
    diag = (r or {}).get("diagnostics") or {}
    shares = [diag.get(k) for k in ("attn_saturation", "ff_saturation")]
    if not all(shares):
        return "—"
    return " / ".join(f"{statistics.mean(s):.0%}" for s in shares)


def _bpc(r: dict[str, Any] | None) -> float | None:
    return r["eval_bpc"] if r else None


def _delta(r: dict[str, Any] | None, ref: float | None) -> str:
    return f"{r['eval_bpc'] - ref:+.4f}" if r and ref is not None else "—"


def _at_rate(lr: float, budget: int = BUDGETS[-1]) -> dict[str, Any] | None:
    """The preset's run at ``budget`` tokens and rate ``lr``: budget40's at its swept rate, lr40's below it."""
    return next((r for g in (BUDGET_GROUP, RATE_GROUP) for r in with_twins(g)
                 if r["preset"] == PRESET and not r.get("model_overrides") and r["train"]["lr"] == lr
                 and 0.9 * budget <= r["tokens"] <= 1.1 * budget), None)


def _reference(r: dict[str, Any]) -> dict[str, Any] | None:
    """What a leads40 run is judged against: the preset at the same FLOPs (flops: the budget its name matches), else
    at the same budget and rate."""
    if flop_matched(r["name"]):
        return _flops_ref(int(re.search(r"-flops-tf-(\d+)m$", r["name"])[1]) * 1_000_000)
    return _at_rate(r["train"]["lr"], r["tokens"])


def _long_part() -> str:
    """leads40's runs against the preset at the same budget and rate (those at tf-1m's FLOPs against flops'
    ka-1m-tuned at the same FLOPs), and their gap to tf-1m at its best rate there; or why it has none yet."""
    rows = with_twins(LONG_GROUP)
    if not rows:
        try:
            names = ", ".join(s.name for s in plan(LONG_GROUP))
        except ConfigError as exc:  # no lead run yet, or none beat ka-1m-tuned: the plan's own computed reason
            return f"At 40M tokens ({LONG_GROUP}): nothing to train yet: {exc}."
        return f"At 40M tokens ({LONG_GROUP}: {names}): _{not_run(LONG_GROUP)}._"
    tf = budget_best("tf-1m", BUDGETS[-1])
    pairs = [(r, _reference(r)) for r in rows]
    body = [[label(r), overrides(r), f"{r['tokens'] / 1e6:.1f}M", fmt(r["eval_bpc"]), _delta(r, _bpc(ref)),
             _delta(r, _bpc(tf)), "—" if flop_matched(r["name"]) else _along(r, ref)] for r, ref in pairs]
    # the references themselves, once each in the order first used, for the absolute numbers
    refs = {label(ref): ref for _, ref in pairs if ref}
    body += [[label(r), "(preset)" if r is not tf else "(the transformer)", f"{r['tokens'] / 1e6:.1f}M",
              fmt(r["eval_bpc"]), "—", _delta(r, _bpc(tf)) if r is not tf else "—", "—"]
             for r in (*refs.values(), tf) if r]
    missing = sorted({f"{PRESET} at lr {r['train']['lr']:g}" for r, ref in pairs
                      if not flop_matched(r["name"]) and ref is None} | ({"tf-1m"} if tf is None else set()))
    note = (f" Not in {BUDGET_GROUP} or {RATE_GROUP} yet: {', '.join(missing)} (`{run_command(BUDGET_GROUP)}`, "
            f"`{run_command(RATE_GROUP)}`)." if missing else "")
    if _flops_ref() is None and any(flop_matched(r["name"]) for r in rows):
        note += f" Not in {FLOPS_GROUP} yet: {_flops_name()} (`{run_command(FLOPS_GROUP)}`)."
    return (f"At 40M tokens ({LONG_GROUP}, seed 0, budget40's schedule; …-lr-X: at the rate lr40 found the preset "
            f"better at there), against {PRESET} at the same budget and rate ({BUDGET_GROUP}, {RATE_GROUP}), and at "
            f"tf-1m's 40M-token training FLOPs (…-flops-tf-40m, its own full schedule to those tokens; a lead that "
            f"beat {PRESET}'s best at 40M on validation), against {PRESET} at the same FLOPs (group {FLOPS_GROUP}), "
            f"test BPC; the gap is to tf-1m at 40M at its best rate "
            f"on validation (the budget curve's point).{note}\n\n"
            + table(["run", "change", "tokens", "test BPC",
                     f"Δ vs {PRESET} at 40M tokens and the same rate (or at tf-1m's 40M FLOPs)", "gap to tf-1m at 40M",
                     f"Δ validation vs {PRESET} at the same rate at {_along_label(BUDGETS[-1])}"], body)
            + _at_best_rates(rows))


def _at_best_rates(rows: list[dict[str, Any]]) -> str:
    """Each lead trained at more than one rate at a budget, at its own best on validation against the preset at its
    own (``budget_best``): a lead that slows part of the model may move the best rate, so that its gain at one rate
    is partly a rate's."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if not flop_matched(r["name"]):
            runs.setdefault(re.sub(r"-lr-[^-]+$", "", r["name"]), []).append(r)
    parts = []
    for stem, own in runs.items():
        best, ref = min(own, key=valid_estimate), budget_best(PRESET, own[0]["tokens"])
        if len(own) < 2 or ref is None:
            continue
        parts.append(f"{stem} at lr {best['train']['lr']:g}, {fmt(best['eval_bpc'])}: Δ "
                     f"{best['eval_bpc'] - ref['eval_bpc']:+.4f} against {label(ref)} (validation "
                     f"{valid_estimate(best) - valid_estimate(ref):+.4f})")
    return ("\n\nEach lead trained at several rates, at its best on validation against the preset at its own best, "
            "test BPC: " + "; ".join(parts) + ".") if parts else ""


ALONG = (0.25, 0.5, 0.75, 1.0)  # where along a schedule the validation estimates are compared


def _along_label(tokens: int) -> str:
    return " / ".join(f"{f * tokens / 1e6:g}M" for f in ALONG)


def _along(r: dict[str, Any], ref: dict[str, Any] | None) -> str:
    """A lead's validation estimate minus the preset's at the same schedule's quarters (each at an evaluation both
    made within 5% of it, else "—"): where along the schedule a lead gains or loses, which its end alone hides (a
    lead slower early that is catching up at the protocol's end goes to 40M)."""
    if ref is None:
        return "—"
    own, base = dict(valid_points(r)), dict(valid_points(ref))
    shared = sorted(set(own) & set(base))
    cells = []
    for f in ALONG:
        at = f * r["tokens"]
        t = min(shared, key=lambda x: abs(x - at), default=None)
        cells.append(f"{own[t] - base[t]:+.3f}" if t is not None and abs(t - at) <= 0.05 * at else "—")
    return " / ".join(cells)


def _flops_name(budget: int = BUDGETS[-1]) -> str:
    return f"{PRESET}-flops-tf-{budget // 1_000_000}m"


def _flops_ref(budget: int = BUDGETS[-1]) -> dict[str, Any] | None:
    """flops' run of ka-1m-tuned at tf-1m's training FLOPs of ``budget`` tokens (the equal-FLOP leads' reference)."""
    return next((r for r in with_twins(FLOPS_GROUP) if r["name"] == _flops_name(budget)), None)


def section() -> str:
    """The notebook's subsection: each lead against ka-1m-tuned's seed 0 and main-tuned's mean, then leads40."""
    seed0, base = _base()
    vals = [r["eval_bpc"] for r in base]
    mean = statistics.mean(vals) if vals else None
    leads = _lead_rows()
    body = [[name, overrides(r) if r else lead.change(),
             f"{r['params']:,}" if r else "—", _flops(lead, r), fmt(r["eval_bpc"]) if r else "not run",
             _delta(r, _bpc(seed0)), _delta(r, mean), *_seeds_cells(_seed_vals(name, r), mean),
             _along(r, seed0) if r else "—", _on_bound(r)]
            for name, lead, r in leads]
    ref = (f"ka-1m-tuned's seed 0 ({label(seed0)}; {seed0['params']:,} params, "
           f"{fmt_per_token(flops_per_token(seed0))} model FLOPs per token, increments on the bound (attention / "
           f"feed-forward) {_on_bound(seed0)}): test BPC {fmt(seed0['eval_bpc'])}"
           if seed0 else f"ka-1m-tuned's seed 0: {not_run(BASE_GROUP, 'not run yet')}")
    spread = (f"; main-tuned over all its {len(vals)} seeds: {mean_sd(vals)}" if vals else "")
    own = [r["eval_bpc"] for r in load_results(BASE_GROUP)]
    rule = (f" leads40 trains every lead that beat main-tuned's mean over its own runs (its twins, confirm's "
            f"runs of {TUNED_CANDIDATE}, left out: they chose the preset): {fmt(statistics.mean(own))} (once a lead "
            "has all its seeds, by its mean over them), and every "
            f"lead whose reason is the budget itself, whatever its score here ({_at_budget()})." if own else "")
    why = _why()
    intro = (why + "Each lead is a field of ka-1m-tuned's own code path or a training setting (groups.LEADS), trained "
             "at the protocol (10M tokens, "
             f"seed 0, main-tuned's rate) and scored on the test split, against the same run without it: {ref}"
             f"{spread}. One seed: a Δ within about twice the seeds' sd is not resolved; every lead that beat "
             f"main-tuned's mean is also run on seeds {', '.join(map(str, LEAD_SEEDS))} ({SEEDS_GROUP})." + rule)
    text = intro + "\n\n" + table(["lead", "change", "params", "model FLOPs/token", "test BPC",
                                   "Δ vs ka-1m-tuned seed 0", "Δ vs main-tuned mean", "over seeds, mean ± sd (n)",
                                   "Δ of means vs main-tuned",
                                   f"Δ validation vs seed 0 at {_along_label(PROTOCOL['tokens'])}",
                                   "increments on the bound, attn / ff"], body)
    if not any(r for _, _, r in leads):
        text += f"\n\n_{not_run(GROUP)}._"
    return text + "\n\n" + _long_part() + "\n\n" + _widths_part()


def _at_budget() -> str:
    return ", ".join(k for k, lead in LEADS.items() if lead.at_budget) or "none"


def _widths() -> tuple[list[tuple[str, Lead, dict[str, Any] | None]], dict[str, Any] | None, dict[str, Any] | None]:
    """Each cheaper width's planned name, change and result (None: not run yet); flops' run of the preset at the same
    FLOPs; tf-1m's 10M-token seed 0 (the FLOPs both spend)."""
    done = {r["name"]: r for r in with_twins(WIDTHS_GROUP)}
    names = [(f"{PRESET}-{k}-flops-tf-10m", lead) for k, lead in WIDTHS.items()]
    ref = _flops_ref(PROTOCOL["tokens"])
    return [(n, lead, done.get(n)) for n, lead in names], ref, budget_runs().get("10M", {}).get("tf-1m")


def _widths_part() -> str:
    """leads-flops: each cheaper width at tf-1m's 10M-token training FLOPs, against the preset at the same FLOPs."""
    rows, ref, tf = _widths()
    body = []
    for name, lead, r in rows:
        tokens = r["tokens"] if r else flop_matched_tokens(PRESET, "tf-1m", PROTOCOL["tokens"], lead.model)
        body.append([name, overrides(r) if r else lead.change(), f"{r['params']:,}" if r else "—", _flops(lead, r),
                     f"{tokens / 1e6:.2f}M", fmt_flops(training_flops(r)) if r else "—",
                     fmt(r["eval_bpc"]) if r else "not run", _delta(r, _bpc(ref)), _delta(r, _bpc(tf))])
    body += [[label(x), "(preset)" if x is ref else "(the transformer)", f"{x['params']:,}",
              fmt_per_token(flops_per_token(x)), f"{x['tokens'] / 1e6:.2f}M", fmt_flops(training_flops(x)),
              fmt(x["eval_bpc"]), "—" if x is ref else _delta(x, _bpc(ref)), "—" if x is tf else _delta(x, _bpc(tf))]
             for x in (ref, tf) if x]
    note = "" if any(r for _, _, r in rows) else f" _{not_run(WIDTHS_GROUP)}._"
    return (f"Cheaper widths at equal FLOPs ({WIDTHS_GROUP}, groups.WIDTHS): ka-1m-tuned's recipe in shapes with its "
            "parameters (±3%) and fewer model FLOPs per token, each trained with its own full schedule at "
            "ka-1m-tuned's rate (seed 0) for the tokens at which its training FLOPs equal tf-1m's 10M-token run, "
            f"against {FLOPS_REF} (group {FLOPS_GROUP}: the preset at those FLOPs), test BPC.{note}\n\n"
            + table(["run", "change", "params", "model FLOPs/token", "tokens", "training FLOPs", "test BPC",
                     f"Δ vs {FLOPS_REF}", "gap to tf-1m"], body))


def widths_phrase() -> str:
    """The summary's words on the cheaper widths (empty until one has run)."""
    rows, ref, tf = _widths()
    done = [(n, r) for n, _, r in rows if r]
    if not done:
        return ""
    return (" At tf-1m's 10M-token FLOPs, cheaper widths (leads-flops, same parameters): "
            + "; ".join(f"{n.removeprefix(PRESET + '-').removesuffix('-flops-tf-10m')} {fmt(r['eval_bpc'])} "
                        f"({r['tokens'] / 1e6:.1f}M tokens, Δ {_delta(r, _bpc(ref))} against {FLOPS_REF}, gap "
                        f"{_delta(r, _bpc(tf))} to tf-1m)" for n, r in done) + ".")


def _why() -> str:
    """What the 40M-token studies measured that the leads answer, from their files (empty where they are missing)."""
    gap_path, dyn_path = protocol.RESULTS / "gap-budget40.json", protocol.RESULTS / "dynamics.json"
    if not gap_path.exists() or not dyn_path.exists():
        return ""
    rows = [r for r in json.loads(dyn_path.read_text()) if r["run"] == f"budget40/{PRESET}-40m"]
    gap = json.loads(gap_path.read_text())
    if not rows or "slow_fraction" not in rows[0] or "tuned" not in gap.get("runs", {}):
        return ""
    dyn = rows[0]
    model = build_model(*get_preset(PRESET))
    context = PROTOCOL["context"]
    start = torch.cat([b.attn.omega.detach().abs() for b in model.blocks]).lt(2 * math.pi / context).float().mean()
    copying = next((r["tuned_gap"] for r in gap.get("by_recall", []) if r["recall"] == 1), None)
    return (f"Where they come from (the 40M-token studies below): the gap by distance into the window is "
            f"{gap_budget.by_position_text(gap, 'tuned')}" + (f", and {copying:+.3f} on the bytes copying from "
                                                               "earlier in the window predicts"
                                                               if copying is not None else "")
            + f"; {statistics.mean(dyn['slow_fraction']):.0%} of the trained oscillators drift slower than once per "
            f"{context}-byte context, against {start.item():.0%} at RoPE's start (slow oscillators are what compare "
            "content far apart), and "
            f"{statistics.mean(dyn['attn_saturation']):.0%} of attention increments sit on the bound. Hence ω's "
            "learning rate and its parametrisation (log ω), the bound's scale, the coupling's second harmonic, and "
            "mixes of a head's oscillators in the score and the step (a route from one oscillator to another); "
            "and, since the Kuramoto models lead tf-1m early and fall behind later, every angle's learning rate and "
            "the weight decay (past the bound's knee the matrices that feed it act through their direction alone, "
            "and a growing norm slows their turning). ")


def _budget_cells(key: str, runs: list[dict[str, Any]], tf: dict[str, Any] | None,
                  ref: dict[str, Any] | None, flops_ref: dict[str, Any] | None) -> list[str]:
    """A lead's 40M cells: its best run there on validation (any rate) against the preset's best, its run at tf-1m's
    40M-token FLOPs against the preset's there, and the gap to tf-1m of each ("—" where not run)."""
    mine = lead_runs_at(f"{PRESET}-{key}", BUDGETS[-1], runs)
    best = min(mine, key=valid_estimate) if mine else None
    flop = next((r for r in runs if r["name"] == f"{PRESET}-{key}-flops-tf-{BUDGETS[-1] // 1_000_000}m"), None)
    return _budget_row(best, flop, tf, ref, flops_ref)


def _budget_row(best: dict[str, Any] | None, flop: dict[str, Any] | None, tf: dict[str, Any] | None,
                ref: dict[str, Any] | None, flops_ref: dict[str, Any] | None) -> list[str]:
    """The 40M cells of ``best`` (at the budget) and ``flop`` (at tf-1m's FLOPs), each with its Δ against its
    reference where one is given, and their gaps to tf-1m."""
    at = "—" if best is None else fmt(best["eval_bpc"]) + (
        f" ({_delta(best, _bpc(ref))}, lr {best['train']['lr']:g})" if ref else f" (lr {best['train']['lr']:g})")
    eq = "—" if flop is None else fmt(flop["eval_bpc"]) + (f" ({_delta(flop, _bpc(flops_ref))})" if flops_ref else "")
    return [at, eq, " / ".join(_delta(r, _bpc(tf)) for r in (best, flop)), fmt_slope(best)]


def _long_plan() -> str:
    """What leads40 would train, or why nothing (the notebook's section gives the numbers)."""
    try:
        plan(LONG_GROUP)
    except ConfigError:  # none beat ka-1m-tuned and none is the budget's, or leads is not complete
        return "none trained (the notebook says why)"
    return not_run(LONG_GROUP, "not run yet")


def summary_section() -> str:
    """RESULTS.md's part on the leads: the preset and every lead run at 40M, at 10M (seed 0) and at 40M with its gaps
    and slope; the leads screened at 10M only are named (the notebook has all of them)."""
    rows = _lead_rows()
    if not any(r for *_, r in rows):
        return (f"Planned ({', '.join(n.removeprefix(PRESET + '-') for n, _, _ in rows)}): "
                f"{not_run(GROUP, 'not run yet')}.")
    seed0, _ = _base()
    tf, ref, flops_ref = budget_best("tf-1m", BUDGETS[-1]), budget_best(PRESET, BUDGETS[-1]), _flops_ref()
    long = with_twins(LONG_GROUP)
    body = [[f"{PRESET} (the preset)", "—", fmt(seed0["eval_bpc"]) if seed0 else "—",
             *_budget_row(ref, flops_ref, tf, None, None)]]
    screened = []
    for name, lead, r in rows:
        key = name.removeprefix(f"{PRESET}-")
        cells = _budget_cells(key, long, tf, ref, flops_ref)
        if cells[0] == "—":
            screened.append(key)
            continue
        body.append([key, overrides(r) if r else lead.change(),
                     f"{fmt(r['eval_bpc'])} ({_delta(r, _bpc(seed0))})" if r else "not run", *cells])
    b, p = f"{BUDGETS[-1] // 1_000_000}M", f"{PROTOCOL['tokens'] // 1_000_000}M"
    return (table(["lead", "change", f"{p}, seed 0 (Δ)", f"{b} tokens (Δ)", f"tf-1m's {b} FLOPs (Δ)",
                   "gap to tf-1m, equal tokens / FLOPs", f"validation slope per doubling {p}→{b}"], body)
            + (f"\n\nScreened at {p} only: {', '.join(screened)}." if screened else "")
            + ("" if long else f" At {b}: {_long_plan()}."))
