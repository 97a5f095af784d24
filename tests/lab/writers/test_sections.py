"""The notebook's and the summary's sections for issues 25 and 26 (SU(2) and the sphere, the tuned recipe at 5M, the
structural leads, the loss gap at 40M tokens), each rendered on no results and on fabricated ones: every figure they
print must be the one computed from the fabricated JSON."""

import json
import math
import statistics

import pytest
import torch
from conftest import write_results

from lab import groups, protocol, select
from lab.protocol import PROTOCOL, TRAIN_DEFAULTS
from lab.retired import LAB, RETIRED
from lab.studies import gap
from lab.writers import common, compute, geometries, results_md, run_table, studies, summary


def cells(text: str, *first: str) -> list[str]:
    """The cells of the table row of ``text`` whose first cells are ``first`` (AssertionError: no such row)."""
    for line in text.splitlines():
        parts = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and parts[:len(first)] == list(first):
            return parts
    raise AssertionError(f"no row {first!r}")


def run(group: str, name: str, preset: str, bpc: float, lr: float = 4e-3, seed: int = 0, tokens: int = 10_000_000,
        split: str = "test", rate: float | None = 20_000.0, params: int = 1_000_000, train: dict | None = None,
        **model) -> dict:
    """A finished run's result as runner.py writes it (the keys the writers read); ``train``: training overrides."""
    r = {"group": group, "name": name, "preset": preset, "family": "kuramoto" if preset.startswith("ka") else
         "transformer", "model_overrides": model, "model": {}, "params": params, "tokens": tokens,
         "train": {"lr": lr, "seed": seed, "phase_lr_mult": TRAIN_DEFAULTS["phase_lr_mult"], "context": 256,
                   **(train or {})},
         "corpus": "enwik7", "eval_split": split, "eval_bpc": bpc, "valid_curve": [[0, 8.0], [tokens, bpc]],
         "curve": [{"tokens": tokens, "elapsed_s": 500.0, "valid_bpc": bpc, "train_bpc": bpc + 0.05}]}
    if rate is not None:
        r["train_tokens_per_s"] = rate
    return r


def seeds(group, preset, vals, rate=20_000.0, lr=4e-3):
    return [run(group, f"{preset}-seed{s}", preset, v, lr=lr, seed=s, rate=rate) for s, v in enumerate(vals)]


def test_not_run_names_the_command_and_what_must_run_first(in_tmp):
    assert common.not_run("main-su2").startswith("Not run yet: `python -m lab run main-su2 --out ")  # a tmp root
    assert common.not_run("main-su2").endswith("(after `lr-su2`, `lr10m-su2`)")
    write_results(in_tmp, [run("lr-su2", f"ka-su2-1m-lr-{lr:g}", "ka-su2-1m", 2.5, lr=lr, split="valid") for lr in
                           protocol.LRS])
    assert common.not_run("main-su2").endswith("(after `lr10m-su2`)")  # the sweep is done: no longer named


def test_su2_section_without_results_says_what_to_run(in_tmp):
    text = geometries.section(select.SU2)
    assert "Not run yet: `python -m lab run lr-su2" in text and "Not run yet: `python -m lab run main-su2" in text
    assert "Not run yet: `python -m lab run lr10m-su2" in text and "not plannable yet" in text
    # the costs per token are known before any run: shown in the not-run rows
    assert cells(text, "ka-su2-1m")[1:] == ["main-su2", "0", "—", "not run", "—", "—", "—", "—", "—", "—",
                                            common.fmt_per_token(groups.flops_per_token("ka-su2-1m")), "—", "—"]
    assert "| vs tf-1m |" not in text  # no differences without numbers
    row = cells(geometries.summary_table(), "SU(2) (issue 25)")
    assert row[3].startswith("not run yet: `python -m lab run main-su2")


def test_su2_section_compares_with_the_torus_presets_and_the_transformer(in_tmp):
    write_results(in_tmp, [run("lr-su2", f"ka-su2-1m-lr-{lr:g}", "ka-su2-1m", b, lr=lr, tokens=3_000_000, split="valid")
                           for lr, b in zip(protocol.LRS, (2.6, 2.5, 2.55), strict=True)])
    write_results(in_tmp, [run("lr10m-su2", f"ka-su2-1m-lr-{lr:g}", "ka-su2-1m", b, lr=lr, split="valid")
                           for lr, b in ((4e-3, 2.3), (8e-3, 2.32))])
    mine, ka, tuned, tf = [2.20, 2.22, 2.21], [2.25, 2.24, 2.26], [2.16, 2.17, 2.15], [2.14, 2.15, 2.13]
    write_results(in_tmp, [*seeds("main-su2", "ka-su2-1m", mine, rate=15_000.0), *seeds("main", "ka-1m", ka),
                           *seeds("main-tuned", "ka-1m-tuned", tuned, rate=16_000.0),
                           *seeds("main", "tf-1m", tf, rate=24_000.0, lr=8e-3)])
    text = geometries.section(select.SU2)
    assert "| ka-su2-1m | lr-su2 | (preset) | 0.004 | 3.0M | 2.5000 | ✓ |" in text
    assert cells(text, "0.004") == ["0.004", "2.5000", "2.3000", "✓"] and cells(text, "0.008")[3] == ""
    gap = statistics.mean(mine) - statistics.mean(tf)
    per_token = common.fmt_per_token(groups.flops_per_token("ka-su2-1m"))
    rows = [line for line in text.splitlines() if line.startswith("| ka-su2-1m | main-su2 |")]
    assert rows[0] == (f"| ka-su2-1m | main-su2 | 3 | 0, 1, 2 | 2.2000, 2.2200, 2.2100 | 2.2100 ± "
                       f"{statistics.stdev(mine):.4f} | 2.2100 | {gap:+.4f} | 1,000,000 | 0.004 | 10.0M | "
                       f"{per_token} | {common.fmt_flops(groups.flops_per_token('ka-su2-1m') * 10_000_000)} | 15,000 |")
    assert cells(text, "tf-1m")[2:4] == ["3", "0, 1, 2"] and cells(text, "tf-1m")[-1] == "24,000"
    assert "| vs tf-1m |" not in text  # the differences of the seeds' means are the reader's, not a table's
    row = cells(geometries.summary_table(), "SU(2) (issue 25)")
    assert row[1:5] == ["`ka-su2-1m`", "3 of 3", f"2.2100 ± {statistics.stdev(mine):.4f}", f"{gap:+.4f}"]
    dyn = [{"group": g, "run": f"{g}/{n}", "local_order": [0.9, 0.8], "global_order": [0.5, 0.4],
            "attn_saturation": [0.5, 1.0]}
           for g, n in (("main-su2", "ka-su2-1m-seed0"), ("budget40", "ka-1m-tuned-40m"))]
    (in_tmp / "results" / "dynamics.json").write_text(json.dumps(dyn))
    assert "| main-su2/ka-su2-1m-seed0 |" in geometries.sync_table(select.SU2)


def test_su2_line_says_how_many_of_its_seeds_are_in(in_tmp):
    write_results(in_tmp, [run("lr10m-su2", f"ka-su2-1m-lr-{lr:g}", "ka-su2-1m", b, lr=lr, split="valid")
                           for lr, b in ((4e-3, 2.3), (8e-3, 2.32))])
    write_results(in_tmp, [*seeds("main-su2", "ka-su2-1m", [2.20]), *seeds("main", "tf-1m", [2.14, 2.15, 2.13])])
    assert cells(geometries.summary_table(), "SU(2) (issue 25)")[2:5] == ["1 of 3", "2.2000 (one seed)", "+0.0600"]
    write_results(in_tmp, seeds("main-su2", "ka-su2-1m", [2.20, 2.22]))
    assert cells(geometries.summary_table(), "SU(2) (issue 25)")[2:4] == ["2 of 3", "2.2100 ± 0.0141"]


def test_su2_screen_puts_each_variant_against_the_sweeps_run_at_its_rate(in_tmp):
    assert "### Variants of ka-su2-1m" not in geometries.section(select.SU2)  # retired: shown where it has results
    write_results(in_tmp, [run("lr-su2", f"ka-su2-1m-lr-{lr:g}", "ka-su2-1m", b, lr=lr, tokens=3_000_000, split="valid")
                           for lr, b in zip(protocol.LRS, (2.6, 2.5, 2.55), strict=True)])
    tuned = {"self_coupling": False, "clock": 8, "dim": 80}
    write_results(in_tmp, [run("screen-su2", f"ka-su2-1m-{k}", "ka-su2-1m", b, tokens=3_000_000, split="valid",
                               train=train, **model)
                           for k, b, model, train in (("tuned", 2.42, tuned, {}),
                                                      ("omega-lr-1", 2.53, {}, {"omega_lr_mult": 1.0}))])
    text = geometries.section(select.SU2)
    # best first, each with its change and its difference from the plain preset's 2.5 at the same rate
    assert text.index("| tuned | self_coupling=False, clock=8, dim=80 | 1,000,000 | 0.004 | 2.4200 | -0.0800 |") < \
        text.index("| omega-lr-1 | omega_lr_mult=1 | 1,000,000 | 0.004 | 2.5300 | +0.0300 |")
    assert cells(geometries.summary_table(), "SU(2) (issue 25)")[-1] == "tuned: 2.4200 (-0.0800)"


def test_a_second_stage_with_one_of_its_two_rates_names_no_winner(in_tmp):
    write_results(in_tmp, [run("lr-su2", f"ka-su2-1m-lr-{lr:g}", "ka-su2-1m", b, lr=lr, tokens=3_000_000, split="valid")
                           for lr, b in zip(protocol.LRS, (2.6, 2.5, 2.55), strict=True)])
    write_results(in_tmp, [run("lr10m-su2", "ka-su2-1m-lr-0.004", "ka-su2-1m", 2.3, lr=4e-3, split="valid")])
    text = geometries.section(select.SU2)
    assert "1 of its 2 rates so far: `python -m lab run lr10m-su2" in text
    assert cells(text, "0.004") == ["0.004", "2.5000", "2.3000", ""]  # no rate chosen yet


def test_the_studies_name_their_label_and_issue_from_the_title():
    assert [(s.label, s.issue) for s in select.STUDIES] == [("SU(2)", "issue 25"),
                                                                ("SU(2) with the tuned recipe", "issue 25"),
                                                                ("The sphere S³ ⊂ R⁴", "issue 25's stretch")]
    assert select.SPHERE.compared[:2] == (("ka-sphere-1m", "main-sphere"), ("ka-su2-1m", "main-su2"))


def test_sphere_section_without_results_says_what_to_run(in_tmp):
    text = geometries.section(select.SPHERE)
    assert "Not run yet: `python -m lab run lr-sphere" in text
    assert "Not run yet: `python -m lab run main-sphere" in text and "(after `lr-sphere`, `lr10m-sphere`)" in text
    assert "Not run yet: `python -m lab run lr10m-sphere" in text and "not plannable yet" in text
    assert "group=sphere" in cells(text, "`ka-sphere-1m`")[1]
    assert "### ka-sphere-1m against ka-su2-1m, ka-1m, ka-1m-tuned, tf-1m" in text
    for p, g in (("ka-sphere-1m", "main-sphere"), ("ka-su2-1m", "main-su2")):  # both non-torus rows, not run
        assert cells(text, p)[1:] == [g, "0", "—", "not run", "—", "—", "—", "—", "—", "—",
                                      common.fmt_per_token(groups.flops_per_token(p)), "—", "—"]
    assert "| vs tf-1m |" not in text
    row = cells(geometries.summary_table(), "The sphere S³ ⊂ R⁴ (issue 25's stretch)")
    assert row[3].startswith("not run yet: `python -m lab run main-sphere")


def test_sphere_section_compares_with_su2_the_torus_presets_and_the_transformer(in_tmp):
    write_results(in_tmp, [run("lr-sphere", f"ka-sphere-1m-lr-{lr:g}", "ka-sphere-1m", b, lr=lr, tokens=3_000_000,
                               split="valid") for lr, b in zip(protocol.LRS, (2.45, 2.5, 2.55), strict=True)])
    best = protocol.LRS[0]
    write_results(in_tmp, [run("lr10m-sphere", f"ka-sphere-1m-lr-{lr:g}", "ka-sphere-1m", b, lr=lr, split="valid")
                           for lr, b in ((best, 2.28), (protocol.LRS[1], 2.31))])
    mine, su, ka, tuned, tf = [2.18, 2.19, 2.23], [2.20, 2.22, 2.21], [2.25, 2.24, 2.26], [2.16, 2.17, 2.15], \
        [2.14, 2.15, 2.13]
    write_results(in_tmp, [*seeds("main-sphere", "ka-sphere-1m", mine, rate=17_000.0, lr=best),
                           *seeds("main-su2", "ka-su2-1m", su, rate=15_000.0), *seeds("main", "ka-1m", ka),
                           *seeds("main-tuned", "ka-1m-tuned", tuned, rate=16_000.0),
                           *seeds("main", "tf-1m", tf, rate=24_000.0, lr=8e-3)])
    text = geometries.section(select.SPHERE)
    assert f"| ka-sphere-1m | lr-sphere | (preset) | {best:g} | 3.0M | 2.4500 | ✓ |" in text
    assert cells(text, f"{best:g}")[3] == "✓"
    gap = statistics.mean(mine) - statistics.mean(tf)
    per_token = groups.flops_per_token("ka-sphere-1m")
    assert cells(text, "ka-sphere-1m", "main-sphere")[1:] == [
        "main-sphere", "3", "0, 1, 2", "2.1800, 2.1900, 2.2300",
        f"{statistics.mean(mine):.4f} ± {statistics.stdev(mine):.4f}", "2.1900", f"{gap:+.4f}", "1,000,000",
        f"{best:g}", "10.0M", common.fmt_per_token(per_token), common.fmt_flops(per_token * 10_000_000), "17,000"]
    gap_su = statistics.mean(su) - statistics.mean(tf)
    assert cells(text, "ka-su2-1m", "main-su2")[1:8] == ["main-su2", "3", "0, 1, 2", "2.2000, 2.2200, 2.2100",
                                          f"2.2100 ± {statistics.stdev(su):.4f}", "2.2100", f"{gap_su:+.4f}"]
    assert text.index("| ka-sphere-1m | main-sphere |") < text.index("| ka-su2-1m | main-su2 |") < \
        text.index("| ka-1m | main |")
    (in_tmp / "results" / "bench.json").write_text(json.dumps({"training": [
        {"mode": "compile", "precision": "bf16", "ka": {"preset": "ka-sphere-1m", "median": 20_000.0},
         "tf": {"preset": "tf-1m", "median": 25_000.0}}]}))
    assert cells(compute.bench_table(), "ka-sphere-1m / tf-1m, bench (compile bf16)")[1] == "20,000 / 25,000"
    row = cells(geometries.summary_table(), "The sphere S³ ⊂ R⁴ (issue 25's stretch)")
    assert row[2:5] == ["3 of 3", f"{statistics.mean(mine):.4f} ± {statistics.stdev(mine):.4f}", f"{gap:+.4f}"]
    # the SU(2) section is not changed by the sphere's results: no sphere row there
    assert "ka-sphere-1m" not in geometries.section(select.SU2)


def test_size_section_without_results_says_what_to_run(in_tmp):
    text = results_md.size_section()
    assert "Not run yet: `python -m lab run lr-5m-tuned" in text and "Not run yet: `python -m lab run main-5m" in text
    # a preset's cost per token is known before it runs; the equal-FLOP run's row waits for it
    assert cells(text, "ka-5m-tuned", "main-5m")[11] == common.fmt_per_token(groups.flops_per_token("ka-5m-tuned"))
    assert cells(text, groups.EQUAL_FLOPS_5M)[4:6] == ["not run", "—"]
    assert "| 5M tuned" not in summary.size_section()


def test_size_section_puts_the_5m_seeds_beside_the_paper(in_tmp):
    write_results(in_tmp, [run("lr-5m-tuned", f"ka-5m-tuned-lr-{lr:g}", "ka-5m-tuned", b, lr=lr, tokens=3_000_000,
                               split="valid") for lr, b in ((5e-4, 2.3), (1e-3, 2.2), (2e-3, 2.25))])
    ka, tf = [1.90, 1.94, 1.91], [1.88, 1.89, 1.93]
    write_results(in_tmp, [*seeds("main-5m", "ka-5m-tuned", ka, lr=1e-3), *seeds("main-5m", "tf-5m", tf, lr=1e-3)])
    text = results_md.size_section()
    assert "| ka-5m-tuned | lr-5m-tuned | (preset) | 0.001 | 3.0M | 2.2000 | ✓ |" in text
    assert cells(text, "ka-5m-tuned", "main-5m")[1:11] == [
        "main-5m", "3", "0, 1, 2", "1.9000, 1.9400, 1.9100", f"{statistics.mean(ka):.4f} ± {statistics.stdev(ka):.4f}",
        f"{statistics.median(ka):.4f}", f"{statistics.mean(ka) - statistics.mean(tf):+.4f}", "1,000,000", "0.001",
        "10.0M"]
    assert cells(text, groups.EQUAL_FLOPS_5M)[4] == "not run"
    page = summary.size_section()
    assert cells(page, "5M tuned, medians")[1:] == ["1.9100", "1.8900", "+0.0200", common.PAPER_5M]
    assert cells(page, "5M tuned (main-5m: ka-5m-tuned)")[3] == f"{statistics.mean(ka) - statistics.mean(tf):+.4f}"
    # main-5m's equal-FLOP run: a row of its own beside the seeds', not counted as a seed
    tokens = groups.flop_matched_tokens("ka-5m-tuned", "tf-5m", PROTOCOL["tokens"])
    write_results(in_tmp, [run("main-5m", groups.EQUAL_FLOPS_5M, "ka-5m-tuned", 1.97, tokens=tokens, lr=1e-3)])
    text = results_md.size_section()
    assert cells(text, "ka-5m-tuned", "main-5m")[2] == "3"  # still three seeds
    assert cells(text, groups.EQUAL_FLOPS_5M)[2:8] == ["1", "0", "1.9700", "1.9700 (one seed)", "1.9700",
                                                       f"{1.97 - statistics.mean(tf):+.4f}"]
    assert cells(text, groups.EQUAL_FLOPS_5M)[10] == common.millions(tokens)
    assert cells(summary.size_section(), "5M tuned at tf-5m's 10M-token FLOPs")[3] == \
        f"{1.97 - statistics.mean(tf):+.4f}"


def _tuned_base(tmp, vals=(2.15, 2.16, 2.17, 2.14, 2.18, 2.16)):
    """main-tuned's seeds and the rate stage its plan (and the leads') read."""
    write_results(tmp, [run("lr10m-tuned", f"ka-1m-tuned-lr-{lr:g}", "ka-1m-tuned", b, lr=lr, split="valid")
                        for lr, b in ((4e-3, 2.1), (8e-3, 2.12))])
    write_results(tmp, seeds("main-tuned", "ka-1m-tuned", list(vals)))
    return list(vals)


def _budget_gap(tmp, tuned=2.25, ka=2.4, tf=2.0, copying=(2.1, 1.5), su2=None) -> None:
    """gap-budget40.json as `python -m lab gap budget40` writes it, from hand-made per-byte losses: six bytes,
    the first three of the class copying predicts."""
    classes = torch.tensor([[1, 1, 1, 0, 0, 0]])
    on = classes == 1
    bits = {k: torch.where(on, torch.tensor(c), torch.tensor(2 * v - c)).float().view(1, 6)
            for k, v, c in (("tuned", tuned, copying[0]), ("ka", ka, copying[0] + 0.2), ("tf", tf, copying[1]),
                            *((("su2", su2, copying[0] - 0.1),) if su2 else ()))}
    names = {"tuned": "ka-1m-tuned-40m", "su2": "ka-su2-1m-tuned-40m", "ka": "ka-1m-40m", "tf": "tf-1m-40m"}
    res = {"group": "budget40", "runs": {k: names[k] for k in bits},
           "windows": 1, "context": 6, "tokens": dict.fromkeys(bits, 40_001_536),
           **{k: b.mean().item() for k, b in bits.items()}, "by_position": gap.by_position(bits),
           "by_difficulty": gap.by_difficulty(bits), "by_recall": gap.by_recall(bits, classes)}
    (tmp / "results").mkdir(exist_ok=True)
    gap.write(res)


def test_gap_at_40m_without_and_with_the_study(in_tmp):
    assert "Not measured yet: `python -m lab gap budget40`" in studies.gap_tables()["gap_budget"]
    assert studies.gap_table().startswith("_Not measured yet")  # neither study: what to run
    ten = {"group": "main", "seeds": [0, 1, 2], "ka": 2.2, "tf": 2.1, "variant": 2.15, "variant_name": "x",
           "by_position": [], "by_difficulty": [{"quartile": q, "bytes": 1, "ka": 2.1 + 0.1 * q, "variant": 2.1,
                                                 "tf": 2.1, "ka_gap": 0.1 * q, "variant_gap": 0.0} for q in range(4)]}
    (in_tmp / "results").mkdir()
    (in_tmp / "results" / "gap.json").write_text(json.dumps(ten))
    assert cells(studies.gap_table(), "main (seeds 0, 1, 2)")[1:] == [
        "ka-1m (ψ(θ) itself)", "+0.100", "—", "—", "—", "+0.000", "+0.300"]
    _budget_gap(in_tmp)
    assert studies.notebook_slots()["gap_budget_tokens"] == "40"
    rows = [line for line in studies.gap_table().splitlines() if line.startswith("| budget40")]
    # pooled 2.25 − 2.0; on the copying class 2.1 − 1.5 (the 10M study has no recall classes)
    assert [r.split(" | ")[1:3] + r.split(" | ")[5:6] for r in rows] == [
        ["ka-1m-tuned", "+0.250", "+0.600"], ["ka-1m", "+0.400", "+0.800"]]
    _budget_gap(in_tmp, su2=2.1)  # the tuned SU(2) model joins once trained
    rows = [line for line in studies.gap_table().splitlines() if line.startswith("| budget40")]
    assert rows[1].split(" | ")[1:3] + rows[1].split(" | ")[5:6] == ["ka-su2-1m-tuned", "+0.100", "+0.500"]
    assert cells(studies.gap_tables()["gap_budget"], "all, pooled")[1:] == [
        "2.250", "2.100", "2.400", "2.000", "+0.250", "+0.100", "+0.400"]  # tuned, su2, ka, tf, then their gaps


def test_the_report_carries_the_new_sections_empty_and_filled(in_tmp):
    write_results(in_tmp, [*seeds("main", "ka-1m", [2.25, 2.24]), *seeds("main", "tf-1m", [2.14, 2.15], lr=8e-3)])
    summary_path, notebook = results_md.write_report(in_tmp)
    text, page = notebook.read_text(), summary_path.read_text()
    for heading in ("## SU(2): the non-abelian state (issue 25)",
                    "## The sphere S³ ⊂ R⁴: AKOrN's oscillators (issue 25's stretch)",
                    "### Structural leads on ka-1m-tuned (issue 26)",
                    "### The tuned recipe at 5M over seeds (issue 26)", "## Where the gap is after 40M tokens"):
        assert heading in text
    assert text.index("### Structural leads") < text.index("## Does the gap close with size?") < \
        text.index("### The tuned recipe at 5M")
    assert text.index("## SU(2)") < text.index("## The sphere S³") < text.index("\n## Ablations of ka-1m\n")
    assert "Not run yet: `python -m lab run main-su2" in text
    assert "No results of leads here: `git checkout aa4b739 && python -m lab run leads`" in text  # retired
    assert "Not run yet: `python -m lab run main-sphere" in text
    assert cells(page, "SU(2) (issue 25)")[3].startswith("not run yet: `python -m lab run main-su2")
    assert page.index("## Closing the gap: structural leads") < page.index("| SU(2) (issue 25) |") < \
        page.index("| The sphere S³ ⊂ R⁴")
    sphere = cells(page, "The sphere S³ ⊂ R⁴ (issue 25's stretch)")
    assert sphere[3].startswith("not run yet: `python -m lab run main-sphere")
    assert "No results of leads40 here" in page and "`python -m lab run main-5m" in page
    # issue 46's sections before their runs exist
    assert "_Not yet run: `python -m lab run fixes40" in page
    assert "$probes46" not in page and "_Not yet run._" in page
    write_results(in_tmp, seeds("main-su2", "ka-su2-1m", [2.2, 2.21]))
    _budget_gap(in_tmp)
    summary_path, notebook = results_md.write_report(in_tmp)
    text, page = notebook.read_text(), summary_path.read_text()
    assert text.index("## Where the gap is after 40M tokens: per-byte loss") > text.index("## SU(2)")
    assert cells(text, "ka-su2-1m", "main-su2")[5] == "2.2050 ± 0.0071"
    assert cells(page, "SU(2) (issue 25)")[3] == "2.2050 ± 0.0071"
    write_results(in_tmp, seeds("main-sphere", "ka-sphere-1m", [2.3, 2.31]))
    summary_path, notebook = results_md.write_report(in_tmp)
    text, page = notebook.read_text(), summary_path.read_text()
    assert cells(text, "ka-sphere-1m", "main-sphere")[5] == "2.3050 ± 0.0071"
    assert cells(page, "The sphere S³ ⊂ R⁴ (issue 25's stretch)")[3] == "2.3050 ± 0.0071"
    assert "| budget40 (40M tokens) | ka-1m-tuned |" in page


def test_readme_presets_table_is_written_from_the_presets(tmp_path):
    from kuramoto_attention.models.presets import preset_table
    path = tmp_path / "README.md"
    path.write_text(f"intro\n{summary.PRESETS_START}\nstale\n{summary.PRESETS_END}\noutro\n")
    assert summary.update_readme(path) == path
    text = path.read_text()
    ka = next(r for r in preset_table() if r["name"] == "ka-1m")
    assert f"| `ka-1m` | kuramoto | {ka['params']:,} | 4 | 128 | 4 | 312 | {ka['what']} |" in text
    assert "stale" not in text and text.startswith("intro\n") and text.endswith("outro\n")
    plain = tmp_path / "OTHER.md"
    plain.write_text("no markers\n")
    assert summary.update_readme(plain) is None and plain.read_text() == "no markers\n"


def test_readme_headline_adds_su2_once_measured(in_tmp):
    write_results(in_tmp, [*seeds("main", "tf-1m", [2.14, 2.15], lr=8e-3), *seeds("main", "ka-1m", [2.25, 2.24])])
    assert "ka-su2-1m" not in summary.headline()  # not measured: no row
    write_results(in_tmp, seeds("main-su2", "ka-su2-1m", [2.27, 2.26]))
    text = summary.headline()
    flops = f"{groups.flops_per_token('ka-su2-1m') / groups.flops_per_token('tf-1m'):.2f}×"
    row = f"| `ka-su2-1m` | the same layer on SU(2) (unit quaternions) | 2 | 2.2650 ± 0.0071 | +0.1200 | {flops} | — |"
    assert row in text  # no bench here: its throughput unknown
    assert "ka-su2-1m-tuned" not in text
    bench = {"training": [{"mode": "compile", "precision": "bf16", "ka": {"preset": "ka-su2-1m", "median": 8_000.0},
                           "tf": {"preset": "tf-1m", "median": 32_000.0}}]}
    (in_tmp / "results" / "bench.json").write_text(json.dumps(bench))
    assert f"| +0.1200 | {flops} | 0.25× |" in summary.headline()


def test_gap_cells_read_the_near_and_the_farthest_bin():
    rows = [{"from": 4, "to": 8, "tuned_gap": 0.5}, {"from": 8, "to": 16, "tuned_gap": 0.1},
            {"from": 128, "to": 256, "tuned_gap": 0.3}]
    res = {"by_position": rows, "tuned": 2.2, "tf": 2.0}
    assert studies.cells(res, "tuned") == ["+0.200", "+0.100", "+0.300", "—"]
    assert studies.bins(res) == ("8–15", "128–255")
    assert studies.cells({**res, "by_position": rows[:1]}, "tuned")[1] == "—"  # no bin from 8: no number


def test_the_leads_quote_the_share_of_slow_oscillators_at_ropes_start(in_tmp):
    """The notebook's sentence on where the leads came from quotes ka-1m-tuned's slow share at initialisation."""
    share = select.slow_at_start("ka-1m-tuned", PROTOCOL["context"])
    assert 0 < share < 1 and studies.notebook_slots()["rope_slow"] == f"{share:.0%}"


def test_geometry_sync_table_sets_the_study_beside_the_torus(in_tmp):
    assert "`python -m lab dynamics lr10m-su2` (then `main-su2`)" in geometries.sync_table(select.SU2)
    (in_tmp / "results").mkdir(exist_ok=True)
    row = {"local_order": [0.9, 0.8], "global_order": [0.5, 0.4, 0.3], "timescale_tokens": [3.0, None],
           "slow_fraction": [0.5, 0.25], "attn_saturation": [1.0, 0.5]}
    (in_tmp / "results" / "dynamics.json").write_text(json.dumps(
        [{**row, "run": "ka-1m-seed0", "group": "main"}, {**row, "run": "lr10m-su2/x", "group": "lr10m-su2"},
         {**row, "run": "confirm/y", "group": "confirm"}]))
    text = geometries.sync_table(select.SU2)
    assert "| lr10m-su2/x | 0.90 → 0.80 | 0.50 → 0.40 → 0.30 | 3.00 → — | 50% → 25% | 100% → 50% |" in text
    assert text.index("lr10m-su2/x") < text.index("ka-1m-seed0") and "confirm/y" not in text
    # a seed evaluated from the second stage's run is that model: its row stands for both
    write_results(in_tmp, [{**run("main-su2", "ka-su2-1m-seed0", "ka-su2-1m", 2.27), "trained_in": "lr10m-su2/x"}])
    rows = json.loads((in_tmp / "results" / "dynamics.json").read_text())
    (in_tmp / "results" / "dynamics.json").write_text(json.dumps(
        [*rows, {**row, "run": "main-su2/ka-su2-1m-seed0", "group": "main-su2"}]))
    text = geometries.sync_table(select.SU2)
    assert "| main-su2/ka-su2-1m-seed0 |" in text and "lr10m-su2/x" not in text


def test_geometry_summary_reads_the_sweep_before_the_seeds(in_tmp):
    write_results(in_tmp, [run("lr-su2", f"ka-su2-1m-lr-{lr:g}", "ka-su2-1m", b, lr=lr, tokens=3_000_000,
                               split="valid") for lr, b in ((2e-3, 2.7), (4e-3, 2.6))])
    write_results(in_tmp, [run("lr", "ka-1m-lr-0.004", "ka-1m", 2.5, tokens=3_000_000, split="valid")])
    assert cells(geometries.summary_table(), "SU(2) (issue 25)")[5] == "0.004: 2.6000"


def test_issue_26_targets_gaps_are_the_40m_runs_differences(in_tmp):
    """Each gap the target's table gives is the fabricated runs' difference (the judgement is a person's)."""
    write_results(in_tmp, [run("main", "tf-1m-seed0", "tf-1m", 2.10), run("main-tuned", "ka-1m-tuned-seed0",
                                                                          "ka-1m-tuned", 2.12),
                           run("budget40", "tf-1m-40m", "tf-1m", 1.90, tokens=40_000_000),
                           run("budget40", "ka-1m-tuned-40m", "ka-1m-tuned", 1.915, tokens=40_000_000)])
    text = summary.budget_section({}, str)  # the gaps at equal tokens: the first table's; at equal FLOPs: the second's
    assert cells(text, "10M")[2] == "2.1200 (+0.020)" and cells(text, "40M")[2] == "1.9150 (+0.015)"
    assert cells(text, "ka-1m-tuned")[2:4] == ["—", "—"]
    write_results(in_tmp, [run("flops", "ka-1m-tuned-flops-tf-40m", "ka-1m-tuned", 1.925, tokens=24_000_000)])
    assert cells(summary.budget_section({}, str), "ka-1m-tuned")[3] == "+0.0250"


def _along(r: dict, points: list[tuple[int, float, float]]) -> dict:
    """``r`` with its curve replaced: (tokens, train BPC, valid BPC) per evaluation."""
    return {**r, "curve": [{"tokens": t, "elapsed_s": 1.0, "train_bpc": a, "valid_bpc": b} for t, a, b in points],
            "final_valid_estimate": points[-1][2]}


def test_the_40m_point_is_the_better_rate_on_validation_never_on_test(in_tmp):
    swept = {**run("budget40", "ka-1m-tuned-40m", "ka-1m-tuned", 2.03, tokens=40_000_000), "final_valid_estimate": 2.05}
    half = {**run("lr40", "ka-1m-tuned-40m-lr-0.002", "ka-1m-tuned", 2.00, lr=2e-3, tokens=40_000_000),
            "final_valid_estimate": 2.06}  # better on test, worse on validation: not chosen
    write_results(in_tmp, [swept, half])
    assert select.budget_runs()["40M"]["ka-1m-tuned"]["name"] == "ka-1m-tuned-40m"
    write_results(in_tmp, [{**half, "final_valid_estimate": 2.04}])
    chosen = select.budget_runs()["40M"]["ka-1m-tuned"]
    assert chosen["name"] == "ka-1m-tuned-40m-lr-0.002" and select.off_rate(chosen)
    assert "2.0000† (lr 0.002)" in summary.budget_section({}, str)  # marked, with the rate it trained at


def test_fit_note_sets_the_training_gap_beside_the_validation_gap(in_tmp):
    b = 40_000_000
    tf = _along(run("budget40", "tf-1m-40m", "tf-1m", 1.90, lr=8e-3, tokens=b),
                [(5_000_000, 2.40, 2.50), (10_000_000, 2.20, 2.30), (b, 1.70, 1.95)])
    ka = _along(run("budget40", "ka-1m-tuned-40m", "ka-1m-tuned", 2.03, tokens=b),
                [(5_000_000, 2.35, 2.45), (10_000_000, 2.28, 2.38), (b, 1.82, 2.07)])
    tf10 = _along(run("main", "tf-1m-seed0", "tf-1m", 2.13, lr=8e-3), [(10_000_000, 2.10, 2.18)])
    ka10 = _along(run("main-tuned", "ka-1m-tuned-seed0", "ka-1m-tuned", 2.15), [(10_000_000, 2.12, 2.20)])
    write_results(in_tmp, [tf, ka, tf10, ka10])
    flat = [x for point in select.fit_gaps(ka, tf) for x in point]
    assert flat == pytest.approx([5_000_000, -0.05, -0.05, 10_000_000, 0.08, 0.08, b, 0.12, 0.12])
    assert cells(compute.fit_table(), "ka-1m-tuned") == ["ka-1m-tuned", "40M", "+0.120", "+0.120", "40M", "5.0M"]
    # per doubling: (1.90 - 2.13) / 2 and (2.03 - 2.15) / 2; anneal cost: 10M tokens into the 40M schedule against
    # the 10M schedule's end, 2.30 - 2.18 and 2.38 - 2.20
    slopes = summary.budget_section({}, str)
    assert cells(slopes, "tf-1m")[5:] == ["-0.115", "—", "—", "+0.120"]
    assert cells(slopes, "ka-1m-tuned")[5:] == ["-0.060", "—", "—", "+0.180"]
    # within the 40M run, from its 10M evaluation: (2.07 - 2.38) / 2
    assert select.valid_slope(ka) == pytest.approx((2.07 - 2.38) / 2) and select.valid_slope(ka10) is None
    assert compute.fit_plot(in_tmp / "fit.png") is not None


def test_each_stretch_adds_its_step_per_doubling(in_tmp):
    """40M → 100M → 300M: test BPC per doubling between consecutive budgets of the curve, a column each."""
    clip = {"grad_clip": 1.0}
    write_results(in_tmp, [run("budget40", "tf-1m-40m", "tf-1m", 1.90, tokens=40_000_000),
                           run("budget100", "tf-1m-100m", "tf-1m", 1.77, tokens=100_000_000, train=clip),
                           run("budget300", "tf-1m-300m", "tf-1m", 1.70, tokens=300_000_000, train=clip)])
    text = summary.budget_section({}, str)
    assert "| 40M→100M | 100M→300M |" in text
    per = [(1.77 - 1.90) / math.log2(100 / 40), (1.70 - 1.77) / math.log2(300 / 100)]
    assert cells(text, "tf-1m")[6:8] == [f"{x:+.3f}" for x in per]


def test_fit_note_reads_the_stretch_budget(in_tmp):
    """budget100's pair joins the fit note, and the slope from 40M to 100M."""
    b, clip = 100_000_000, {"grad_clip": 1.0}
    tf = _along(run("budget100", "tf-1m-100m", "tf-1m", 1.77, tokens=b, train=clip),
                [(50_000_000, 1.80, 1.90), (b, 1.50, 1.80)])
    ka = _along(run("budget100", "ka-1m-tuned-100m", "ka-1m-tuned", 1.95, lr=2e-3, tokens=b, train=clip),
                [(50_000_000, 1.90, 2.00), (b, 1.70, 1.92)])
    write_results(in_tmp, [tf, ka])
    assert cells(compute.fit_table(), "ka-1m-tuned") == ["ka-1m-tuned", "100M", "+0.200", "+0.120", "100M", "never"]
    assert cells(summary.budget_section({}, str), "tf-1m")[5:] == ["—", "—", "—", "—"]  # no 40M points to measure from
    assert compute.clip_table(groups.all_results()) == ""  # no run kept its clipping
    write_results(in_tmp, [run("budget40", "tf-1m-40m", "tf-1m", 1.90, tokens=40_000_000),
                           run("budget40", "ka-1m-tuned-40m", "ka-1m-tuned", 2.00, tokens=40_000_000)])
    per = math.log2(b / 40_000_000)
    assert cells(summary.budget_section({}, str), "tf-1m")[6] == f"{(1.77 - 1.90) / per:+.3f}"
    assert cells(summary.budget_section({}, str), "ka-1m-tuned")[6] == f"{(1.95 - 2.00) / per:+.3f}"


def test_clip_table_gives_each_runs_clipped_share_and_omegas_rate(in_tmp):
    def rough(group, name, preset, clipped, **train):
        r = run(group, name, preset, 2.0, **train)
        return {**r, "train": {**r["train"], **train}, "clipping": {"clip": 1.0, "steps": 1000,
                                                                   "clipped_steps": clipped}}

    rows = [rough("leads", "ka-a", "ka-1m-tuned", 20, phase_lr_mult=20.0, omega_lr_mult=None),
            rough("leads", "ka-b", "ka-1m-tuned", 2, phase_lr_mult=20.0, omega_lr_mult=1.0),
            rough("budget100", "tf-1m-100m", "tf-1m", 0), rough("leads", "ka-c", "ka-1m-tuned", 74),
            rough("leads", "ka-apart", "ka-1m-tuned", 500, clip_angles_apart=True)]  # not one norm: left out
    text = compute.clip_table(rows)
    assert [cells(text, n)[2:5] for n in ("ka-c", "ka-a", "ka-b", "tf-1m-100m")] == [
        ["×20", "7.40%", "74 of 1,000"], ["×20", "2.00%", "20 of 1,000"], ["×1", "0.20%", "2 of 1,000"],
        ["—", "0.00%", "0 of 1,000"]]
    assert cells(text, "ka-apart")[3] == "—"  # its clip is not one norm
    assert compute.clip_table([run("leads", "x", "ka-1m", 2.0)]) == ""


def test_clip_table_names_the_parts_the_gradient_is_in(in_tmp):
    spikes = {"clip": 1.0, "steps": 2000, "clipped_steps": 40,
              "parts": {"clipped": {"ff": 0.5, "attn": 0.3, "angles": 0.1, "prototypes": 0.05},
                        "all": {"ff": 0.2, "attn": 0.4, "angles": 0.2, "prototypes": 0.1}}}
    rows = [{**run("leads40", "ka-b", "ka-1m-tuned", 2.0), "clipping": spikes},
            {**run("leads40", "ka-a", "ka-1m-tuned", 2.0), "clipping": {**spikes, "clipped_steps": 3}},
            {**run("leads40", "ka-c", "ka-1m-tuned", 2.0), "clipping": {**spikes, "clipped_steps": 0}},
            run("leads40", "ka-d", "ka-1m", 2.1),
            {**run("leads40", "ka-e", "ka-1m", 2.1), "clipping": {"clip": 1.0, "steps": 9, "clipped_steps": 0}}]
    text = compute.clip_table(rows)
    assert cells(text, "ka-b")[4:] == ["40 of 2,000", "attn 40%, ff 20%, angles 20%", "ff 50%, attn 30%, angles 10%"]
    assert cells(text, "ka-a")[4:] == ["3 of 2,000", "attn 40%, ff 20%, angles 20%", "—"]  # too few to rank
    assert cells(text, "ka-e")[5:] == ["—", "—"]  # its log kept no part's norm


def test_fit_tables_are_empty_without_the_largest_budget(in_tmp):
    write_results(in_tmp, seeds("main", "tf-1m", [2.13]))
    assert compute.fit_table() == "" and compute.rate_table() == "" and compute.fit_plot(in_tmp / "fit.png") is None


def test_rate_table_sets_each_half_rate_run_beside_its_swept_one(in_tmp):
    assert compute.rate_table() == ""
    b = 40_000_000
    rows = [{**run("budget40", "tf-1m-40m", "tf-1m", 1.88, lr=8e-3, tokens=b), "final_valid_estimate": 1.91},
            {**run("budget40", "ka-1m-tuned-40m", "ka-1m-tuned", 2.03, tokens=b), "final_valid_estimate": 2.04},
            {**run("lr40", "tf-1m-40m-lr-0.004", "tf-1m", 1.87, lr=4e-3, tokens=b), "final_valid_estimate": 1.90},
            {**run("lr40", "ka-1m-tuned-40m-lr-0.002", "ka-1m-tuned", 1.95, lr=2e-3, tokens=b),
             "final_valid_estimate": 1.97}]
    write_results(in_tmp, rows)
    text = compute.rate_table()
    assert cells(text, "ka-1m-tuned")[1:] == ["0.002", "1.9500", "1.9700", "0.004", "2.0300", "2.0400"]
    assert cells(text, "tf-1m")[1:] == ["0.004", "1.8700", "1.9000", "0.008", "1.8800", "1.9100"]


def test_the_summarys_ablation_table_gives_each_models_flops(in_tmp):
    full = run("main", "ka-1m-seed0", "ka-1m", 2.25)
    no_ff = run("ablation", "ka-no-ff", "ka-1m", 2.60, ff="none", ff_proj="none")
    write_results(in_tmp, [full, no_ff])
    text = summary.ablation_section()
    per = select.flops_per_token(no_ff)
    assert per < select.flops_per_token(full)  # the feed-forward's FLOPs leave with it
    assert f"| no-ff | +0.3500 | — | +0.27 | {common.fmt_per_token(per)} / — |" in text
    assert cells(text, "(full model: test BPC)")[1:3] == ["2.2500", "—"]
    per_full = common.fmt_per_token(select.flops_per_token(full))
    assert cells(text, "(full model: test BPC)")[4].startswith(f"{per_full} /")


def test_a_flop_matched_lead_is_not_a_run_of_the_largest_budget(in_tmp):
    """leads40's runs at tf-1m's FLOPs stop short of 40M tokens: the fit study reads the 40M-token runs only."""
    b40 = 40_001_536
    write_results(in_tmp, [run("leads40", "ka-1m-tuned-omega-lr-1-40m", "ka-1m-tuned", 1.99, tokens=b40),
                           run("leads40", "ka-1m-tuned-omega-lr-1-flops-tf-40m", "ka-1m-tuned", 1.95,
                               tokens=24_330_240)])
    assert [name for name, _ in select.fit_runs()] == ["ka-1m-tuned-omega-lr-1-40m"]
    assert groups.flop_matched("ka-1m-tuned-omega-lr-1-flops-tf-40m")
    assert not groups.flop_matched("ka-1m-tuned-omega-lr-1-40m")


def test_probe40_table_reads_the_gap_by_copy_depth_and_the_fitted_temperatures(in_tmp):
    """Each copy depth's bytes, tf-1m's BPC and each model's gap; in full, the temperatures and the knee's shares."""
    import json

    assert summary.probe40_section().startswith("_Not yet run: `python -m lab probe40`")
    temps = {"tf-1m": {"temperature": 1.05, "bpc_at_1": 1.90, "bpc_fitted": 1.89},
             "ka-40m": {"temperature": 1.03, "bpc_at_1": 2.03, "bpc_fitted": 2.0275}}
    layers = [{"attn": {"past_knee": 0.986}, "ff": {"past_knee": 1.0}},
              {"attn": {"past_knee": 0.5}, "ff": {"past_knee": 0.0}}]
    probe = {"runs": {"tf-1m": "lr40/a", "ka-40m": "lr40/b"}, "temperature": temps, "steps": {"ka-40m": layers},
             "by_copy_depth": [
                 {"depth": 0, "bytes": 12004, "tf": 2.0893, "ka-40m_gap": 0.0787, "ka-40m_gap_bits": 300.0},
                 {"depth": 8, "bytes": 823, "tf": 0.4, "ka-40m_gap": 0.3, "ka-40m_gap_bits": 100.0}]}
    (in_tmp / "results").mkdir()
    (in_tmp / "results" / "probe40.json").write_text(json.dumps(probe))
    text = summary.probe40_section()
    assert text.splitlines()[0].split(" | ")[-1].rstrip(" |") == "ka"
    assert cells(text, "0")[1:] == ["12,004", "2.0893", "+0.079"]
    assert cells(text, "8")[1:] == ["823", "0.4000", "+0.300"]
    assert cells(text, "1–8: share of bytes / of the gap")[1:] == [f"{823 / (12004 + 823):.0%}", "", "25%"]
    assert "fitted temperature: BPC (gain)" not in text
    full = summary.probe40_section(full=True)
    assert cells(full, "fitted temperature: BPC (gain)")[2:] == [f"1.050: 1.8900 ({1.89 - 1.90:+.4f})",
                                                             f"1.030: 2.0275 ({2.0275 - 2.03:+.4f})"]
    assert cells(full, "attention steps past the bound's knee, per layer")[3:] == ["99% / 50%"]
    assert cells(full, "feed-forward steps past the bound's knee, per layer")[3:] == ["100% / 0%"]


def test_a_training_lead_names_its_setting_in_the_change_column():
    from lab.writers.common import overrides

    r = run("leads", "ka-1m-tuned-decay-0.3", "ka-1m-tuned", 2.17, train={"weight_decay": 0.3})
    assert overrides(r) == "weight_decay=0.3"
    assert overrides(run("leads", "x", "ka-1m-tuned", 2.17)) == "(preset)"


# the retired groups' tables: each run beside its reference (select.reference), columns run, change, tokens, lr,
# split, BPC, validation estimate, reference, Δ

def test_a_retired_groups_runs_are_judged_against_their_references(in_tmp):
    lag = {"phase_lag": True, "self_coupling": False}
    write_results(in_tmp, [
        run("main-unprojected", "ka-1m-seed0", "ka-1m", 2.30, **groups.UNPROJECTED),
        run("main", "tf-1m-seed0", "tf-1m", 2.13, lr=8e-3),
        run("lr10m", "ka-1m-lr-0.002", "ka-1m", 2.31, lr=2e-3, **groups.UNPROJECTED),
        run("lr10m", "tf-1m-lr-0.004", "tf-1m", 2.14),
        run("warmup10m", "ka-1m-warmup-30", "ka-1m", 2.29, train={"warmup": 30}, **groups.UNPROJECTED),
        run("warmup10m", "tf-1m-warmup-30", "tf-1m", 2.12, lr=8e-3, train={"warmup": 30}),
        *(run("budget", n, p, b, tokens=20_000_000, **m) for n, p, b, m in (
            ("ka-1m-20m", "ka-1m", 2.20, groups.UNPROJECTED), ("tf-1m-20m", "tf-1m", 2.00, {}),
            ("ka-1m-phase-lag-no-self-20m", "ka-1m", 2.10, {**groups.UNPROJECTED, **lag})))])
    text = run_table.group_tables(("budget", "lr10m", "warmup10m"))
    # a variant against its preset's own model there (ψ(θ) itself, the group's, left out of its change)
    assert cells(text, "ka-1m-phase-lag-no-self-20m")[1:] == [
        "phase_lag=True, self_coupling=False", "20.0M", "0.004", "enwik7/test", "2.1000", "—", "budget/ka-1m-20m",
        "-0.1000"]
    # a preset's own model against its group's transformer; a transformer with no rerun against nothing
    assert cells(text, "ka-1m-20m")[1] == "(preset)" and cells(text, "ka-1m-20m")[7:] == ["budget/tf-1m-20m", "+0.2000"]
    assert cells(text, "tf-1m-20m")[7:] == ["—", "—"]
    # no run of ka-1m on ψ(θ) itself at the lower rate: its group's transformer
    assert cells(text, "ka-1m-lr-0.002")[7:] == ["lr10m/tf-1m-lr-0.004", "+0.1700"]
    # a transformer at another rate, with no rerun: against its own model at the swept rate
    assert cells(text, "tf-1m-lr-0.004")[7:] == ["main/tf-1m-seed0", "+0.0100"]
    # a setting outside the variants (the warmup): against the same model at the same rate
    assert cells(text, "ka-1m-warmup-30")[7:] == ["main-unprojected/ka-1m-seed0", "-0.0100"]
    assert cells(text, "tf-1m-warmup-30")[7:] == ["main/tf-1m-seed0", "-0.0100"]
    retired = run_table.group_tables(("scale",))
    assert "No results of scale here: `git checkout aa4b739 && python -m lab run scale`" in retired


def test_the_5m_runs_are_judged_against_tf_5m_and_the_variants_against_ka_5m(in_tmp):
    write_results(in_tmp, [run("scale", "ka-5m", "ka-5m", 2.20, lr=8e-3),
                           run("scale", "ka-5m-lr-0.002", "ka-5m", 2.16, lr=2e-3),
                           {**run("scale", "tf-5m", "tf-5m", 2.05, lr=8e-3), "final_valid_estimate": 2.08},
                           {**run("scale", "tf-5m-lr-0.002", "tf-5m", 2.01, lr=2e-3), "final_valid_estimate": 2.04},
                           run("scale-variant", "ka-5m-phase-lag-no-self", "ka-5m", 2.17, lr=2e-3, phase_lag=True,
                               self_coupling=False)])
    text = run_table.group_tables(("scale", "scale-variant"))
    assert cells(text, "ka-5m")[7:] == ["scale/tf-5m-lr-0.002", "+0.1900"]  # tf-5m's best on validation
    assert cells(text, "ka-5m-lr-0.002")[7:] == ["scale/tf-5m-lr-0.002", "+0.1500"]
    assert cells(text, "tf-5m-lr-0.002")[6] == "2.0400"
    assert cells(text, "tf-5m")[7:] == ["scale/tf-5m-lr-0.002", "+0.0400"]  # the first of its own model's other runs
    assert cells(text, "ka-5m-phase-lag-no-self")[7:] == ["scale/ka-5m-lr-0.002", "+0.0100"]  # ka-5m at its rate


def test_the_leads_are_judged_against_the_preset_at_the_same_budget_rate_and_seed(in_tmp):
    b40, log = 40_001_536, {"omega": "log"}
    write_results(in_tmp, [
        *seeds("main-tuned", "ka-1m-tuned", [2.15, 2.16]),
        run("budget40", "ka-1m-tuned-40m", "ka-1m-tuned", 2.03, tokens=b40),
        run("lr40", "ka-1m-tuned-40m-lr-0.002", "ka-1m-tuned", 2.00, lr=2e-3, tokens=b40),
        run("flops", "ka-1m-tuned-flops-tf-40m", "ka-1m-tuned", 2.05, tokens=24_330_240),
        run("leads", "ka-1m-tuned-omega-log", "ka-1m-tuned", 2.14, **log),
        run("leads-seeds", "ka-1m-tuned-omega-log-seed1", "ka-1m-tuned", 2.17, seed=1, **log),
        run("leads40", "ka-1m-tuned-omega-log-40m-lr-0.002", "ka-1m-tuned", 2.01, lr=2e-3, tokens=b40, **log),
        run("leads40", "ka-1m-tuned-omega-lr-1-40m", "ka-1m-tuned", 1.99, tokens=b40, train={"omega_lr_mult": 1.0}),
        run("leads40", "ka-1m-tuned-omega-log-flops-tf-40m", "ka-1m-tuned", 2.03, tokens=23_000_000, **log)])
    text = run_table.group_tables(("leads", "leads-seeds", "leads40"))
    assert cells(text, "ka-1m-tuned-omega-log")[1] == "omega=log"
    assert cells(text, "ka-1m-tuned-omega-log")[7:] == ["main-tuned/ka-1m-tuned-seed0", "-0.0100"]
    assert cells(text, "ka-1m-tuned-omega-log-seed1")[7:] == ["main-tuned/ka-1m-tuned-seed1", "+0.0100"]
    assert cells(text, "ka-1m-tuned-omega-log-40m-lr-0.002")[7:] == ["lr40/ka-1m-tuned-40m-lr-0.002", "+0.0100"]
    assert cells(text, "ka-1m-tuned-omega-lr-1-40m")[1] == "omega_lr_mult=1"
    assert cells(text, "ka-1m-tuned-omega-lr-1-40m")[7:] == ["budget40/ka-1m-tuned-40m", "-0.0400"]
    # at tf-1m's 40M-token FLOPs: against the preset at those FLOPs, whatever each one's tokens
    assert cells(text, "ka-1m-tuned-omega-log-flops-tf-40m")[7:] == ["flops/ka-1m-tuned-flops-tf-40m", "-0.0200"]
    page = run_table.group_table("leads40", run_table.LEAD_COLUMNS)  # RESULTS.md's: run, lr, BPC, valid, Δ, slope
    assert cells(page, "ka-1m-tuned-omega-lr-1-40m")[1:] == ["0.004", "1.9900", "—", "-0.0400", "—"]


def test_a_rerun_is_judged_against_the_run_it_repeats(in_tmp):
    b = 40_000_000
    write_results(in_tmp, [{**run(g, n, p, bpc, lr=lr, tokens=b), "final_valid_estimate": valid}
                           for g, n, p, bpc, valid, lr in (
                               ("lr40", "tf-1m-40m-lr-0.004", "tf-1m", 1.85, 1.88, 4e-3),
                               ("repro40", "tf-1m-40m-lr-0.004-rerun", "tf-1m", 1.86, 1.87, 4e-3),
                               ("lr40", "ka-1m-tuned-40m-lr-0.002", "ka-1m-tuned", 2.01, 2.02, 2e-3),
                               ("repro40", "ka-1m-tuned-40m-lr-0.002-rerun", "ka-1m-tuned", 1.99, 2.03, 2e-3))])
    text = run_table.group_table("repro40")
    assert cells(text, "tf-1m-40m-lr-0.004-rerun")[5:] == ["1.8600", "1.8700", "lr40/tf-1m-40m-lr-0.004", "+0.0100"]
    assert cells(text, "ka-1m-tuned-40m-lr-0.002-rerun")[5:] == [
        "1.9900", "2.0300", "lr40/ka-1m-tuned-40m-lr-0.002", "-0.0200"]


def test_the_repro40_table_reads_the_committed_reruns():
    """Each committed rerun's row: its test BPC and validation estimate, and its Δ against the lr40 run it repeats."""
    root = protocol.COMMITTED
    if not (root / "repro40").is_dir():
        pytest.skip("no committed results/")
    with protocol.at_root(root):
        text = run_table.group_table("repro40")
        for rerun in protocol.load_results("repro40"):
            old = next(r for r in protocol.load_results("lr40") if f"{r['name']}-rerun" == rerun["name"])
            assert cells(text, rerun["name"])[5:] == [
                f"{rerun['eval_bpc']:.4f}", f"{rerun['final_valid_estimate']:.4f}", f"lr40/{old['name']}",
                f"{rerun['eval_bpc'] - old['eval_bpc']:+.4f}"]


def test_capacity_shapes_join_the_probes_table_against_the_presets_capacity_run(in_tmp):
    tokens = groups.CAPACITY_TOKENS
    write_results(in_tmp, [run("lr10m-tuned", "ka-1m-tuned-lr-0.004", "ka-1m-tuned", 2.1, split="valid")])
    write_results(in_tmp, [run("capacity", f"{p}-enwik6-20m", p, b, tokens=tokens, split="train")
                           for p, b in (("tf-1m", 1.05), ("ka-1m-tuned", 1.14))])
    names = [groups.shape_run(s) for s in groups.CAPACITY_SHAPES]
    assert f"Not yet run: {', '.join(names)} (`python -m lab run capacity-shape" in summary.probes46_section()
    model = groups.CAPACITY_SHAPES["ff-wide"]
    write_results(in_tmp, [{**run("capacity-shape", names[0], "ka-1m-tuned", 1.1, tokens=tokens, split="train",
                                  **model), "curve": [{"tokens": t, "valid_bpc": b, "train_bpc": b}
                                                      for t, b in ((10_000_000, 1.3), (tokens, 1.12))]}])
    text = summary.probes46_section()
    # the shape against the preset's capacity run; its validation slope per doubling from 10M
    assert cells(text, names[0])[1:] == [common.changes(model), "enwik7/train", "1.1000", f"{1.1 - 1.14:+.4f}",
                                         f"{(1.12 - 1.3) / math.log2(2):+.3f}"]
    assert cells(text, "ka-1m-tuned-enwik6-20m")[4] == f"{1.14 - 1.05:+.4f}"  # the preset against tf-1m's run
    assert cells(text, "tf-1m-enwik6-20m")[4] == "—"
    assert f"Not yet run: {', '.join(names[1:])} (" in text


def test_the_stretch_trains_at_the_rate_lr40_found_better_and_is_marked(in_tmp):
    """Where the preset is better on validation below its swept rate at 40M, budget100 and budget300 train it there,
    marked."""
    _tuned_base(in_tmp)
    b40 = 40_001_536
    write_results(in_tmp, [
        {**run("budget40", "ka-1m-tuned-40m", "ka-1m-tuned", 2.03, tokens=b40), "final_valid_estimate": 2.05},
        {**run("budget40", "tf-1m-40m", "tf-1m", 1.88, lr=8e-3, tokens=b40), "final_valid_estimate": 1.91},
        {**run("lr40", "tf-1m-40m-lr-0.004", "tf-1m", 1.85, lr=4e-3, tokens=b40), "final_valid_estimate": 1.88},
        run("lr", "tf-1m-lr-0.008", "tf-1m", 2.5, lr=8e-3, split="valid")])
    assert groups.rate_at("ka-1m-tuned", 40_000_000) == 4e-3  # the swept rate is the better so far
    write_results(in_tmp, [{**run("lr40", "ka-1m-tuned-40m-lr-0.002", "ka-1m-tuned", 2.00, lr=2e-3, tokens=b40),
                            "final_valid_estimate": 2.02}])
    assert groups.rate_at("ka-1m-tuned", 40_000_000) == 2e-3
    stretch = {s.preset: s for s in groups.plan("budget100")}
    assert stretch["ka-1m-tuned"].train["lr"] == 2e-3 and stretch["tf-1m"].train["lr"] == 4e-3
    assert select.off_rate(run("budget100", "ka-1m-tuned-100m", "ka-1m-tuned", 1.9, lr=2e-3))
    assert {"budget40", "lr40"} <= groups.reads("budget100")  # planned after the runs that choose its rate
    longest = {s.preset: s for s in groups.plan("budget300")}  # the same pair and rates, to 300M tokens
    assert {p: s.train["lr"] for p, s in longest.items()} == {p: s.train["lr"] for p, s in stretch.items()}
    assert {s.train["tokens"] for s in longest.values()} == {groups.LONG_BUDGET}
    assert select.off_rate(run("budget300", "ka-1m-tuned-300m", "ka-1m-tuned", 1.9, lr=2e-3))
    assert {"budget40", "lr40"} <= groups.reads("budget300")
    write_results(in_tmp, [run("budget300", "tf-1m-300m", "tf-1m", 1.7, lr=4e-3, tokens=300_000_256)])
    assert select.budget_runs()["300M"]["tf-1m"]["name"] == "tf-1m-300m"  # the curve's last point


def test_the_fixes_are_judged_against_their_preset_at_the_same_rate_and_tf_1ms_best(in_tmp, monkeypatch):
    monkeypatch.setattr(groups, "swept_rate", lambda preset: 0.004)  # the 10M sweep, which the schedule starts from
    b, fsn = 40_000_000, groups.FIXES["fsn"].model
    write_results(in_tmp, [
        {**run("budget40", "ka-1m-tuned-40m", "ka-1m-tuned", 2.03, tokens=b), "final_valid_estimate": 2.05},
        {**run("lr40", "ka-1m-tuned-40m-lr-0.002", "ka-1m-tuned", 2.02, lr=2e-3, tokens=b),
         "final_valid_estimate": 2.04},
        {**run("budget40", "tf-1m-40m", "tf-1m", 1.85, lr=8e-3, tokens=b), "final_valid_estimate": 1.88},
        run("fixes40", "fsn-40m", "ka-1m-tuned", 2.01, lr=2e-3, tokens=b, **fsn),
        run("fixes40-flops", "fsn-flops-tf-40m", "ka-1m-tuned", 2.04, lr=2e-3, tokens=23_000_000, **fsn),
        run("fixes40-retired", "scaled-step-40m", "ka-1m-tuned", 2.07, lr=2e-3, tokens=b, bound="scaled")])
    text = summary.fixes_section()
    # its change, test BPC, Δ against the preset at its rate (lr40's), gaps to tf-1m's best at equal tokens and FLOPs
    assert cells(text, "fsn")[1:] == ["successor_heads=2, harmonics=2", "2.0100", "-0.0100", "+0.1600", "+0.1900", "—"]
    assert cells(text, "scaled-step (retired)")[3:6] == ["+0.0500", "+0.2200", "—"]
    assert "Not yet run: bound-elementwise-40m, successor-2-40m (`python -m lab run fixes40" in text


def test_every_committed_run_of_a_group_issue_47_retired_is_a_row_of_the_report():
    """The groups retired with their planners (issue 47) are reported by the generic tables, a row per run, named."""
    root = protocol.COMMITTED
    if not (root.parent / "docs" / "notebook.md").is_file() or not (root / "leads").is_dir():
        pytest.skip("no committed results/ and report")
    rows = {c.strip() for page in (root.parent / "RESULTS.md", root.parent / "docs" / "notebook.md")
            for line in page.read_text().splitlines() if line.startswith("|") for c in line.strip("|").split("|")}
    missing = {g: [p.stem for p in (root / g).glob("*.json") if p.stem not in rows] for g, ret in RETIRED.items()
               if (ret.commit, ret.command) == LAB and g != "screen-su2"}  # the SU(2) screen's rows: its variants
    assert missing and not any(missing.values()), missing
