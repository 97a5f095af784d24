"""Issue 26's structural leads on ka-1m-tuned (groups.LEADS): at 10M (leads, leads-seeds), at 40M (leads40), widths."""

import re

from kuramoto_attention.errors import ConfigError
from lab import groups
from lab.groups import BUDGETS, LEADS, Lead, budget_best, flop_matched, plan, valid_estimate, with_twins
from lab.protocol import PROTOCOL, load_results, run_command
from lab.retired import RETIRED_LEADS
from lab.writers import common, compute
from lab.writers.common import Run, bpcs, by_name, count, diff, fmt, label, lr, mean, millions, not_run, note, table

PRESET, GROUP, LONG_GROUP, BASE_GROUP, BUDGET_GROUP = "ka-1m-tuned", "leads", "leads40", "main-tuned", "budget40"
SEEDS_GROUP, RATE_GROUP = "leads-seeds", "lr40"
WIDTHS_GROUP, FLOPS_GROUP = "leads-flops", "flops"  # the cheaper widths, and the preset at the same FLOPs
ALONG = (0.25, 0.5, 0.75, 1.0)  # where along a schedule the validation estimates are compared


def _lead_rows() -> list[tuple[str, Lead, Run | None]]:
    """Each lead's planned name, its change and its result (None: not run yet), then the retired leads' (marked)."""
    done = by_name(GROUP)
    return ([(f"{PRESET}-{k}", lead, done.get(f"{PRESET}-{k}")) for k, lead in LEADS.items()]
            + [(f"{r['name']} (retired)", Lead(r.get("model_overrides", {})), r) for g in RETIRED_LEADS
               for r in load_results(g)])


def _flops(lead: Lead, r: Run | None) -> str:
    # a lead's cost is known before it runs: the same count, from its preset and overrides
    return compute.costs(r or {"preset": PRESET, "model_overrides": lead.model, "train": {}, "tokens": 0})[0]


def _flops_ref(budget: int = BUDGETS[-1]) -> Run | None:
    """flops' run of ka-1m-tuned at tf-1m's training FLOPs of ``budget`` tokens (the equal-FLOP leads' reference)."""
    return by_name(FLOPS_GROUP).get(f"{PRESET}-flops-tf-{budget // 1_000_000}m")


def _reference(r: Run) -> Run | None:
    """A leads40 run's reference: the preset at the same FLOPs, else at the same budget and rate (budget40, lr40)."""
    if flop_matched(r["name"]):
        return _flops_ref(int(re.search(r"-flops-tf-(\d+)m$", r["name"])[1]) * 1_000_000)
    return next((x for g in (BUDGET_GROUP, RATE_GROUP) for x in with_twins(g)
                 if x["preset"] == PRESET and not x.get("model_overrides") and x["train"]["lr"] == r["train"]["lr"]
                 and 0.9 * r["tokens"] <= x["tokens"] <= 1.1 * r["tokens"]), None)


def _along_label(tokens: int) -> str:
    return " / ".join(f"{f * tokens / 1e6:g}M" for f in ALONG)


def _along(r: Run | None, ref: Run | None) -> str:
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
    base = common.seed_runs(BASE_GROUP, PRESET)
    seed0, tuned = next((r for r in base if r["train"]["seed"] == 0), None), mean(bpcs(base))
    own = mean(bpcs(load_results(BASE_GROUP)))  # leads40's bar: main-tuned's own runs (not confirm's, which chose it)
    body = [[label(seed0) if seed0 else f"{PRESET} seed 0: {not_run(BASE_GROUP, 'not run yet')}", "(preset)",
             count(seed0), _flops(Lead({}), seed0), fmt(seed0 and seed0["eval_bpc"]), "—", diff(seed0, tuned), "—",
             "—", "—", common.saturation(seed0), ""],
            [f"{BASE_GROUP}, all {len(base)} seeds", "(preset)", "", "", common.mean_sd(bpcs(base)), *[""] * 7],
            [f"{BASE_GROUP}, its own runs (leads40's bar)", "(preset)", "", "", fmt(own), *[""] * 7]]
    for name, lead, r in (rows := _lead_rows()):
        more = sorted((x for x in load_results(SEEDS_GROUP) if x["name"].startswith(f"{name}-seed")),
                      key=lambda x: x["train"]["seed"])
        vals = bpcs(([r] if r else []) + more)  # seed 0 (leads), then leads-seeds' runs of it
        body.append([name, common.overrides(r) if r else lead.change(), count(r), _flops(lead, r),
                     fmt(r["eval_bpc"]) if r else "not run", diff(r, seed0), diff(r, tuned),
                     f"{common.mean_sd(vals)} ({len(vals)})" if len(vals) > 1 else "—",
                     diff(mean(vals), tuned) if len(vals) > 1 else "—", _along(r, seed0), common.saturation(r),
                     "✓" * lead.at_budget])
    seeds = ", ".join(map(str, (0, *groups.LEAD_SEEDS)))
    text = table(["lead", "change", "params", "model FLOPs/token", "test BPC", f"Δ vs {PRESET} seed 0",
                  f"Δ vs {BASE_GROUP} mean", f"over seeds {seeds}, mean ± sd (n)",
                  f"Δ of means vs {BASE_GROUP}", f"Δ validation vs seed 0 at {_along_label(PROTOCOL['tokens'])}",
                  "increments on the bound, attn / ff", "to 40M whatever its score"], body)
    text += "" if any(r for *_, r in rows) else note(not_run(GROUP))
    return "\n\n".join([text, _long_part(), _widths_part()])


def _long_part() -> str:
    """leads40's runs against the preset at the same tokens and rate (or FLOPs), and at their best rates."""
    if not (rows := with_twins(LONG_GROUP)):
        try:
            names = ", ".join(s.name for s in plan(LONG_GROUP))
        except ConfigError as exc:  # no lead run yet, or none beat ka-1m-tuned: the plan's own computed reason
            return f"_At 40M tokens ({LONG_GROUP}): nothing to train yet: {exc}._"
        return f"_At 40M tokens ({LONG_GROUP}: {names}): {not_run(LONG_GROUP)}._"
    tf = budget_best("tf-1m", BUDGETS[-1])
    pairs = [(r, _reference(r)) for r in rows]
    body = [[label(r), common.overrides(r), millions(r["tokens"]), fmt(r["eval_bpc"]), diff(r, ref), diff(r, tf),
             "—" if flop_matched(r["name"]) else _along(r, ref)] for r, ref in pairs]
    refs = {label(ref): ref for _, ref in pairs if ref}  # the references, once each, for their absolute numbers
    body += [[label(r), "(preset)" if r is not tf else "(the transformer)", millions(r["tokens"]), fmt(r["eval_bpc"]),
              "—", diff(r, tf) if r is not tf else "—", "—"] for r in (*refs.values(), tf) if r]
    missing = sorted({f"{PRESET} at lr {lr(r)}" for r, ref in pairs if not flop_matched(r["name"]) and ref is None}
                     | ({"tf-1m"} if tf is None else set()))
    text = table(["run", "change", "tokens", "test BPC", f"Δ vs {PRESET} at the same tokens and rate (or FLOPs)",
                  "gap to tf-1m at 40M", f"Δ validation vs {PRESET} at the same rate at {_along_label(BUDGETS[-1])}"],
                 body)
    if missing:
        text += note(f"Not in {BUDGET_GROUP} or {RATE_GROUP} yet: {', '.join(missing)} "
                     f"(`{run_command(BUDGET_GROUP)}`, `{run_command(RATE_GROUP)}`)")
    if _flops_ref() is None and any(flop_matched(r["name"]) for r in rows):
        text += note(f"Not in {FLOPS_GROUP} yet: {PRESET}-flops-tf-40m (`{run_command(FLOPS_GROUP)}`)")
    runs: dict[str, list[Run]] = {}
    for r in (r for r in rows if not flop_matched(r["name"])):
        runs.setdefault(re.sub(r"-lr-[^-]+$", "", r["name"]), []).append(r)
    best = [[f"{stem} (best rate)", lr(b), fmt(b["eval_bpc"]), label(ref), diff(b, ref),
             diff(valid_estimate(b), valid_estimate(ref))]
            for stem, own in runs.items() if len(own) > 1 and (ref := budget_best(PRESET, own[0]["tokens"]))
            for b in [min(own, key=valid_estimate)]]
    return text + ("\n\n" + table(["lead at several rates", "its best lr (validation)", "test BPC",
                                    "the preset at its best", "Δ test", "Δ validation"], best) if best else "")


def _widths_part() -> str:
    """leads-flops: each cheaper width at tf-1m's 10M-token training FLOPs, against the preset at the same FLOPs."""
    done = by_name(WIDTHS_GROUP)
    ref, tf = _flops_ref(PROTOCOL["tokens"]), compute.budget_runs().get("10M", {}).get("tf-1m")
    rows = [(name, common.overrides(r) if r else lead.change(), lead, r, r["tokens"] if r else
             groups.flop_matched_tokens(PRESET, "tf-1m", PROTOCOL["tokens"], lead.model))
            for k, lead in groups.WIDTHS.items() for name in [f"{PRESET}-{k}-flops-tf-10m"] for r in [done.get(name)]]
    rows += [(label(x), "(preset)" if x is ref else "(the transformer)", Lead(), x, x["tokens"])
             for x in (ref, tf) if x]
    body = [[name, change, count(r), _flops(lead, r), millions(tokens, 2),
             compute.fmt_flops(compute.training_flops(r)), fmt(r["eval_bpc"]) if r else "not run",
             "—" if r is ref else diff(r, ref), "—" if r is tf else diff(r, tf)]
            for name, change, lead, r, tokens in rows]
    return table(["cheaper width", "change", "params", "model FLOPs/token", "tokens", "training FLOPs", "test BPC",
                  f"Δ vs {PRESET}-flops-tf-10m", "gap to tf-1m"], body) + ("" if done else note(not_run(WIDTHS_GROUP)))


def summary_section() -> str:
    """RESULTS.md's leads: the preset and every lead run at 40M, at 10M and at 40M."""
    rows = _lead_rows()
    if not any(r for *_, r in rows):
        return (f"Planned ({', '.join(n.removeprefix(PRESET + '-') for n, _, _ in rows)}): "
                f"{not_run(GROUP, 'not run yet')}.")
    seed0 = next((r for r in common.seed_runs(BASE_GROUP, PRESET) if r["train"]["seed"] == 0), None)
    tf, ref, flops_ref = budget_best("tf-1m", BUDGETS[-1]), budget_best(PRESET, BUDGETS[-1]), _flops_ref()
    long, b, p = with_twins(LONG_GROUP), f"{BUDGETS[-1] // 1_000_000}M", f"{PROTOCOL['tokens'] // 1_000_000}M"
    at_flops = {x["name"]: x for x in long}

    def cells(top: Run | None, flop: Run | None, base: bool) -> list[str]:
        at = "—" if top is None else fmt(top["eval_bpc"]) + f" ({'' if base else diff(top, ref) + ', '}lr {lr(top)})"
        eq = "—" if flop is None else fmt(flop["eval_bpc"]) + ("" if base else f" ({diff(flop, flops_ref)})")
        return [at, eq, f"{diff(top, tf)} / {diff(flop, tf)}", compute.fmt_slope(top)]

    body = [[f"{PRESET} (the preset)", fmt(seed0 and seed0["eval_bpc"]), *cells(ref, flops_ref, True)]]
    body += [[name.removeprefix(f"{PRESET}-"), f"{fmt(r and r['eval_bpc'])} ({diff(r, seed0)})",
              *cells(min(mine, key=valid_estimate), at_flops.get(f"{name}-flops-tf-{b.lower()}"), False)]
             for name, _, r in rows if (mine := groups.lead_runs_at(name, BUDGETS[-1], long))]  # the leads run at 40M
    try:
        plan(LONG_GROUP)
        at_long = "" if long else f" At {b}: {not_run(LONG_GROUP, 'not run yet')}."
    except ConfigError:  # none beat ka-1m-tuned and none is the budget's, or leads is not complete
        at_long = f" At {b}: none trained (the notebook says why)."
    return (table(["lead", f"{p}, seed 0 (Δ)", f"{b} tokens (Δ, lr)", f"tf-1m's {b} FLOPs (Δ)",
                   "gap to tf-1m, equal tokens / FLOPs", f"validation slope per doubling {p}→{b}"], body) + at_long)
