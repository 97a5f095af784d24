"""Issue 26's structural leads on ka-1m-tuned (groups.LEADS): at 10M (leads, leads-seeds), at 40M (leads40), widths."""

from kuramoto_attention.errors import ConfigError
from lab import groups, select
from lab.groups import BUDGETS, Lead, budget_best, flop_matched, plan, valid_estimate, with_twins
from lab.protocol import PROTOCOL, load_results, run_command
from lab.select import ALONG, LEAD_PRESET, Run, bpcs, mean
from lab.writers import common
from lab.writers.common import costs, count, diff, fmt, fmt_flops, fmt_slope, label, lr, millions, not_run, note, table

PRESET, GROUP, LONG_GROUP, BASE_GROUP, BUDGET_GROUP = LEAD_PRESET, "leads", "leads40", "main-tuned", "budget40"
RATE_GROUP = "lr40"
WIDTHS_GROUP, FLOPS_GROUP = "leads-flops", "flops"  # the cheaper widths, and the preset at the same FLOPs


def _flops(lead: Lead, r: Run | None) -> str:
    # a lead's cost is known before it runs: the same count, from its preset and overrides
    return costs(r or {"preset": PRESET, "model_overrides": lead.model, "train": {}, "tokens": 0})[0]


def _along_label(tokens: int) -> str:
    return " / ".join(f"{f * tokens / 1e6:g}M" for f in ALONG)


def _along(r: Run | None, ref: Run | None) -> str:
    """A run's validation estimate minus the reference's at the schedule's quarters (``select.along``)."""
    if r is None or ref is None:
        return "—"
    return " / ".join("—" if d is None else f"{d:+.3f}" for d in select.along(r, ref))


def section() -> str:
    """The notebook's leads: at 10M, at 40M, at their best rates, and the cheaper widths."""
    base = select.seed_runs(BASE_GROUP, PRESET)
    seed0, tuned = next((r for r in base if r["train"]["seed"] == 0), None), mean(bpcs(base))
    own = mean(bpcs(load_results(BASE_GROUP)))  # leads40's bar: main-tuned's own runs (not confirm's, which chose it)
    body = [[label(seed0) if seed0 else f"{PRESET} seed 0: {not_run(BASE_GROUP, 'not run yet')}", "(preset)",
             count(seed0), _flops(Lead({}), seed0), fmt(seed0 and seed0["eval_bpc"]), "—", diff(seed0, tuned), "—",
             "—", "—", common.saturation(seed0), ""],
            [f"{BASE_GROUP}, all {len(base)} seeds", "(preset)", "", "", common.mean_sd(bpcs(base)), *[""] * 7],
            [f"{BASE_GROUP}, its own runs (leads40's bar)", "(preset)", "", "", fmt(own), *[""] * 7]]
    for name, lead, r in (rows := select.lead_rows()):
        vals = bpcs(([r] if r else []) + select.lead_seeds(name))  # seed 0 (leads), then leads-seeds' runs of it
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
    pairs = [(r, select.lead_reference(r)) for r in rows]
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
    if select.flops_ref() is None and any(flop_matched(r["name"]) for r in rows):
        text += note(f"Not in {FLOPS_GROUP} yet: {PRESET}-flops-tf-40m (`{run_command(FLOPS_GROUP)}`)")
    best = [[f"{stem} (best rate)", lr(b), fmt(b["eval_bpc"]), label(ref), diff(b, ref),
             diff(valid_estimate(b), valid_estimate(ref))] for stem, b, ref in select.lead_rates(rows)]
    return text + ("\n\n" + table(["lead at several rates", "its best lr (validation)", "test BPC",
                                    "the preset at its best", "Δ test", "Δ validation"], best) if best else "")


def _widths_part() -> str:
    """leads-flops: each cheaper width at tf-1m's 10M-token training FLOPs, against the preset at the same FLOPs."""
    done = select.by_name(WIDTHS_GROUP)
    ref, tf = select.flops_ref(PROTOCOL["tokens"]), select.budget_runs().get("10M", {}).get("tf-1m")
    rows = [(name, common.overrides(r) if r else lead.change(), lead, r, r["tokens"] if r else
             groups.flop_matched_tokens(PRESET, "tf-1m", PROTOCOL["tokens"], lead.model))
            for k, lead in groups.WIDTHS.items() for name in [f"{PRESET}-{k}-flops-tf-10m"] for r in [done.get(name)]]
    rows += [(label(x), "(preset)" if x is ref else "(the transformer)", Lead(), x, x["tokens"])
             for x in (ref, tf) if x]
    body = [[name, change, count(r), _flops(lead, r), millions(tokens, 2),
             fmt_flops(select.training_flops(r)), fmt(r["eval_bpc"]) if r else "not run",
             "—" if r is ref else diff(r, ref), "—" if r is tf else diff(r, tf)]
            for name, change, lead, r, tokens in rows]
    return table(["cheaper width", "change", "params", "model FLOPs/token", "tokens", "training FLOPs", "test BPC",
                  f"Δ vs {PRESET}-flops-tf-10m", "gap to tf-1m"], body) + ("" if done else note(not_run(WIDTHS_GROUP)))


def summary_section() -> str:
    """RESULTS.md's leads: the preset and every lead run at 40M, at 10M and at 40M."""
    rows = select.lead_rows()
    if not any(r for *_, r in rows):
        return (f"Planned ({', '.join(n.removeprefix(PRESET + '-') for n, _, _ in rows)}): "
                f"{not_run(GROUP, 'not run yet')}.")
    seed0 = select.seed0(BASE_GROUP, PRESET)
    tf, ref, at_ref = budget_best("tf-1m", BUDGETS[-1]), budget_best(PRESET, BUDGETS[-1]), select.flops_ref()
    long, b, p = with_twins(LONG_GROUP), f"{BUDGETS[-1] // 1_000_000}M", f"{PROTOCOL['tokens'] // 1_000_000}M"
    at_flops = {x["name"]: x for x in long}

    def cells(top: Run | None, flop: Run | None, base: bool) -> list[str]:
        at = "—" if top is None else fmt(top["eval_bpc"]) + f" ({'' if base else diff(top, ref) + ', '}lr {lr(top)})"
        eq = "—" if flop is None else fmt(flop["eval_bpc"]) + ("" if base else f" ({diff(flop, at_ref)})")
        return [at, eq, f"{diff(top, tf)} / {diff(flop, tf)}", fmt_slope(top)]

    body = [[f"{PRESET} (the preset)", fmt(seed0 and seed0["eval_bpc"]), *cells(ref, at_ref, True)]]
    body += [[name.removeprefix(f"{PRESET}-"), f"{fmt(r and r['eval_bpc'])} ({diff(r, seed0)})",
              *cells(min(mine, key=valid_estimate), at_flops.get(f"{name}-flops-tf-{b.lower()}"), False)]
             for name, _, r in rows if (mine := groups.lead_runs_at(name, BUDGETS[-1], long))]  # the leads run at 40M
    try:
        plan(LONG_GROUP)
        at_long = "" if long else f" At {b}: {not_run(LONG_GROUP, 'not run yet')}."
    except ConfigError:  # none beat ka-1m-tuned and none is the budget's, or leads is not complete
        at_long = f" At {b}: none trained (the notebook says why)."
    return (table(["lead", f"{p}, seed 0 (Δ)", f"{b} tokens (Δ, lr)", f"tf-1m's {b} FLOPs (Δ)",
                   "gap to tf-1m, equal tokens / FLOPs", f"{common.SLOPE} {p}→{b}"], body) + at_long)
