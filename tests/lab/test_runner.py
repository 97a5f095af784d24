"""The replication protocol's bookkeeping: plans, best-lr selection, RESULTS.md generation."""

import dataclasses
import json
import re
import statistics

import pytest
from conftest import write_results

from benchmarks import bench
from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.config import flat_fields
from kuramoto_attention.models.presets import apply_overrides, build_model, get_preset
from lab import groups, protocol, records, retired, select
from lab import runner as experiment
from lab.writers import common
from lab.writers import results_md as results
from lab.writers.common import second_stage_section


def fake_result(group: str, name: str, preset: str, bpc: float, lr: float = 2e-3, seed: int = 0, **model) -> dict:
    family = "kuramoto" if preset.startswith("ka") else "transformer"
    return {"group": group, "name": name, "preset": preset, "family": family, "model_overrides": model, "model": {},
            "train": {"lr": lr, "seed": seed, "phase_lr_mult": 1.0}, "params": 1, "tokens": 10_000_000,
            "corpus": "enwik7", "eval_split": "test", "eval_bpc": bpc, "valid_curve": [[0, 8.0], [10_000_000, bpc]]}


def cells(text: str, *first: str) -> list[str]:
    """The cells of the table row of ``text`` whose first cells are ``first`` (AssertionError: no such row)."""
    for line in text.splitlines():
        parts = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and parts[:len(first)] == list(first):
            return parts
    raise AssertionError(f"no row {first!r}")


def test_best_lr_reads_the_sweep(in_tmp):
    with pytest.raises(ConfigError, match="learning-rate sweep"):
        groups.best_lr("ka-1m")
    write_results(in_tmp, [fake_result("lr", f"ka-1m-lr-{lr:g}", "ka-1m", bpc, lr=lr) for lr, bpc in
                           [(1e-3, 2.0), (2e-3, 1.9), (4e-3, 1.95)]])
    assert groups.best_lr("ka-1m") == 2e-3
    with pytest.raises(ConfigError, match="tf-1m"):  # the transformer's sweep is absent: main cannot be planned
        groups.plan("main")


def test_best_lr_counts_a_sweep_run_that_another_group_made(in_tmp):
    """A sweep's run made identically by another group is not trained again (a twin): its rate still competes, and
    planning records the twin's group as a dependency."""
    specs = [s for s in groups.plan("lr") if s.preset == "tf-1m"]
    twin_spec, rest = specs[0], specs[1:]
    twin = fake_result("confirm", "tf-x", "tf-1m", 1.5, lr=twin_spec.train["lr"])
    twin["model"], twin["train"] = records.expected_configs(twin_spec)
    twin["eval_split"] = twin_spec.eval_split
    write_results(in_tmp, [twin, *(fake_result("lr", s.name, "tf-1m", 2.0, lr=s.train["lr"]) for s in rest)])
    assert groups.best_lr("tf-1m") == twin_spec.train["lr"]
    with protocol.recording_reads() as seen:
        groups.best_lr("tf-1m")
    assert seen == {"lr", "confirm"}


def test_plans_are_well_formed():
    names = [s.name for s in groups.plan("lr")]
    assert len(names) == len(set(names)) and "tf-1m-lr-0.016" in names
    assert {s.preset for s in groups.plan("lr")} == {"ka-1m", "tf-1m"}
    with pytest.raises(ConfigError, match="unknown experiment group"):
        groups.plan("nonsense")


def test_retired_groups_are_named_with_their_commit_and_not_planned():
    """Every retired group names the commit that runs it and the command there; planning one says so; none is a kept
    group, and no kept group plans a retired field or value."""
    assert set(retired.RETIRED).isdisjoint({**groups.GROUPS, **groups.FROZEN})
    for group, ret in retired.RETIRED.items():
        assert re.fullmatch(r"[0-9a-f]{7,40}", ret.commit) and ret.what
        assert retired.rerun_command(group) == f"git checkout {ret.commit} && {ret.command.format(group=group)}"
        with pytest.raises(ConfigError, match=re.escape(f"git checkout {ret.commit} && ")):
            groups.plan(group)
    assert retired.RETIRED["confirm"].commit == "7d67ce1"
    assert retired.rerun_command("leads40") == "git checkout aa4b739 && python -m lab run leads40"
    for group in (*groups.GROUPS, *groups.FROZEN):
        try:
            specs = groups.plan(group)
        except ConfigError:
            continue
        for s in specs:
            assert not set(s.model) & set(retired.RETIRED_FIELDS), (group, s.name)
            assert not retired.retired_settings(s.model), (group, s.name)


def test_every_results_folder_is_a_kept_or_a_retired_group():
    root = protocol.COMMITTED
    if not root.is_dir():
        pytest.skip("no committed results/")
    for folder in (p for p in root.iterdir() if p.is_dir() and p.name != bench.ARCHIVE.name):
        assert folder.name in {**groups.GROUPS, **groups.FROZEN, **retired.RETIRED}, folder.name
    # the retired groups' results are still read: in the pool twins are found in, and in the notebook
    assert {r["group"] for r in groups.all_results()} >= {g for g in retired.RETIRED if (root / g).is_dir()} or \
        protocol.RESULTS != protocol.COMMITTED


def test_results_md_is_computed_from_files(in_tmp):
    ka, tf = [1.70, 1.72, 1.68], [1.65, 1.66, 1.64]
    rows = [fake_result("main", f"ka-1m-seed{i}", "ka-1m", b, seed=i) for i, b in enumerate(ka)]
    rows += [fake_result("main", f"tf-1m-seed{i}", "tf-1m", b, seed=i) for i, b in enumerate(tf)]
    rows += [fake_result("ablation", "ka-no-ff", "ka-1m", 1.95, ff="none")]
    write_results(in_tmp, rows)
    summary_path, notebook = results.write_report(in_tmp)
    assert summary_path == in_tmp / "RESULTS.md" and notebook == in_tmp / "docs" / "notebook.md"
    text = notebook.read_text()
    summary = summary_path.read_text()
    assert "`python -m lab report`" in summary and "(docs/notebook.md)" in summary and "(../RESULTS.md)" in text
    assert cells(summary, "ka-1m")[4] == f"{statistics.mean(ka) - statistics.mean(tf):+.4f}"
    assert "1.637 ± 0.010" in summary
    assert "| no-ff | +0.2500 | — | +0.27 |" in summary  # the ablation's Δ beside the paper's
    assert "![validation curves](results/curves.png)" in summary and "(../results/curves.png)" in text
    assert "`python -m lab run budget40`" in summary and "`python -m lab run flops`" in summary  # not run: said so
    gap = statistics.mean(ka) - statistics.mean(tf)
    assert f"{gap:+.4f}" in text
    assert f"{statistics.mean(ka):.4f} ± {statistics.stdev(ka):.4f}" in text
    assert f"{1.95 - 1.70:+.4f}" in text and "+0.27" in text  # ablation delta vs main seed 0, beside the paper's
    assert (in_tmp / "results" / "curves.png").stat().st_size > 1000
    assert "No runs yet" in text  # pycode group absent: said so, not invented
    # the gap along training is read off the same runs' validation curves: all start at 8.0, end at the test BPC
    assert cells(text, "0.0M")[1] == "+0.000" and cells(text, "10.0M")[1] == f"{gap:+.3f}"


def test_lr_section_marks_the_best_rate_and_the_curve_gives_the_gap_at_the_sweep_budget(in_tmp):
    from lab.writers import compute

    write_results(in_tmp, [fake_result("lr", f"ka-1m-lr-{lr:g}", "ka-1m", b, lr=lr)
                           for lr, b in [(2e-3, 2.7), (4e-3, 2.6)]])
    write_results(in_tmp, [fake_result("lr", "tf-1m-lr-0.008", "tf-1m", 2.5, lr=8e-3)])
    text = results.lr_section()
    assert "| ka-1m | lr | phase_lr_mult=1 | 0.004 | 10.0M | 2.6000 | ✓ |" in text  # fake_result's phase rate
    assert "| ka-1m | lr | phase_lr_mult=1 | 0.002 | 10.0M | 2.7000 |  |" in text
    assert "| 3M | ka-1m | lr/ka-1m-lr-0.004 | test | 2.6000 | +0.1000 |" in compute.budget_section()


def test_frozen_groups_keep_their_feed_forward(in_tmp):
    """Groups run while the feed-forward read raw θ, then ψ(θ) itself stay reproducible after the default moved on
    (to P ψ(θ)); the groups on wrap(θ) are retired, and the sweep of theirs that main-raw reads is read from its
    results."""
    write_results(in_tmp, [fake_result("lr", f"{p}-lr-0.002", p, 2.0, lr=2e-3) for p in ("ka-1m", "tf-1m")])
    write_results(in_tmp, [fake_result("lr-wrapped", "ka-1m-lr-0.004", "ka-1m", 2.0, lr=4e-3, **groups.RAW,
                                       ff_wrap=True)])
    write_results(in_tmp, [fake_result("lr-unprojected", "ka-1m-lr-0.008", "ka-1m", 2.0, lr=8e-3,
                                       **groups.UNPROJECTED)])
    for group in ("main-raw", "ablation-raw", "main-unprojected", "ablation-unprojected", "pycode-unprojected"):
        assert all("ff" in s.model and "ff_hidden" in s.model and "ff_proj" in s.model for s in groups.plan(group)
                   if s.preset.startswith("ka"))
    assert all(s.model == {**groups.UNPROJECTED, **groups.RAW} for s in groups.plan("main-raw"))
    assert all(s.model == groups.UNPROJECTED for s in groups.plan("main-unprojected"))
    assert {s.preset for s in groups.plan("main-raw")} == {"ka-1m"}
    assert all(s.model == {} for s in groups.plan("main"))  # current defaults
    # frozen groups keep the lr of the sweep they ran with; the current ones read the current sweep
    for group in ("main-raw", "ablation-raw"):
        assert {s.train["lr"] for s in groups.plan(group)} == {4e-3}
    for group in ("main-unprojected", "ablation-unprojected", "pycode-unprojected"):
        assert {s.train["lr"] for s in groups.plan(group)} == {8e-3}
    assert {s.train["lr"] for s in groups.plan("main") + groups.plan("ablation")} == {2e-3}
    raw = {s.name: s.model for s in groups.plan("ablation-raw")}
    assert raw["ka-no-gates"] == {**groups.UNPROJECTED, **groups.RAW, "gates": False} and "ka-ff-angles" not in raw
    assert raw["ka-ff-lift"] == {**groups.RAW, **groups.UNPROJECTED}
    assert groups.RAW["ff_proj"] == "none"
    current = {s.name: s.model for s in groups.plan("ablation")}
    # the full model reads P ψ(θ): ψ(θ) itself and raw θ are both ablations of it now
    assert current["ka-ff-lift"] == groups.UNPROJECTED and current["ka-ff-angles"]["ff_proj"] == "none"
    assert current["ka-no-ff"] == {"ff": "none", "ff_proj": "none"}
    # every frozen group keeps ka-1m on ψ(θ) itself or raw θ (no P) in its own overrides, whatever today's default
    for group in groups.FROZEN:
        for s in groups.plan(group):
            if s.preset == "ka-1m":
                model = records.expected_configs(s)[0]
                assert model["ff_proj"] == "none" and model["ff_hidden"] in (200, 336), s.name
    # the notebook strips ψ(θ) itself from the overrides of ka-1m's runs in the frozen and retired groups only
    assert set(groups.FROZEN) | set(retired.RETIRED) == groups.RAN_UNPROJECTED
    assert not {"lr", "main", "ablation", "pycode"} & groups.RAN_UNPROJECTED
    ka5 = flat_fields(get_preset("ka-5m")[1])  # ka-5m's preset did not move
    assert (ka5["ff_proj"], ka5["ff_hidden"]) == ("none", 442)


def test_tuned_groups_run_the_protocol_on_the_tuned_preset(in_tmp):
    """lr-tuned, lr10m-tuned, main-tuned, ablation-tuned, pycode-tuned: ka-1m-tuned alone; the 3M sweep's two best
    rates go to 10M tokens (scored on valid), whose best the others train at; its ablations change the preset (none is
    the preset itself); a confirm run identical to a planned run is its twin, under the planned preset."""
    assert {s.preset for s in groups.plan("lr-tuned")} == {"ka-1m-tuned"}
    with pytest.raises(ConfigError, match="0 of its 3 rates"):
        groups.plan("lr10m-tuned")
    write_results(in_tmp, [fake_result("lr-tuned", f"ka-1m-tuned-lr-{lr:g}", "ka-1m-tuned", b, lr=lr)
                           for lr, b in ((2e-3, 2.1), (4e-3, 2.06))])
    with pytest.raises(ConfigError, match="2 of its 3 rates"):  # a sweep cut short does not pick the rates
        groups.plan("lr10m-tuned")
    write_results(in_tmp, [fake_result("lr-tuned", "ka-1m-tuned-lr-0.008", "ka-1m-tuned", 2.05, lr=8e-3)])
    second = groups.plan("lr10m-tuned")
    assert {s.preset for s in second} == {"ka-1m-tuned"}
    assert [(s.train["lr"], s.train["tokens"], s.eval_split) for s in second] == [(8e-3, 10_000_000, "valid"),
                                                                                 (4e-3, 10_000_000, "valid")]
    with pytest.raises(ConfigError, match="lr10m-tuned"):
        groups.plan("main-tuned")
    write_results(in_tmp, [fake_result("lr10m-tuned", s.name, "ka-1m-tuned", b, lr=s.train["lr"])
                           for s, b in zip(second, (1.9, 1.8), strict=True)])
    for group in ("main-tuned", "ablation-tuned", "pycode-tuned"):
        specs = groups.plan(group)
        assert {s.preset for s in specs} == {"ka-1m-tuned"} and {s.train["lr"] for s in specs} == {4e-3}
    assert [s.train["seed"] for s in groups.plan("main-tuned")] == [0, 1, 2, *groups.TUNED_FRESH_SEEDS]
    assert [s.train["corpus"] for s in groups.plan("pycode-tuned")] == ["pycode"]
    tuned = flat_fields(get_preset("ka-1m-tuned")[1])
    ablations = {s.name: s.model for s in groups.plan("ablation-tuned")}
    assert set(ablations) == {f"ka-{k}" for k in groups.TUNED_ABLATIONS}
    for name, change in ablations.items():
        assert any(tuned[k] != v for k, v in change.items()), name
        build_model("kuramoto", apply_overrides("kuramoto", get_preset("ka-1m-tuned")[1], change))
    spec = groups.plan("main-tuned")[0]
    model, train = records.expected_configs(spec)
    twin = {**fake_result("confirm", "ka-x", "ka-1m", 2.0, lr=4e-3), "model": model, "train": train}
    write_results(in_tmp, [twin])
    rows = groups.with_twins("main-tuned")
    assert [(r["name"], r["preset"], r["twin"]) for r in rows] == [(spec.name, "ka-1m-tuned", "confirm/ka-x")]


def test_tuned_sections_read_the_transformer_of_main_and_the_rate_stages(in_tmp):
    """main-tuned has no transformer runs of its own: its table and gap use main's; the rate's two stages are set
    side by side."""
    write_results(in_tmp, [fake_result("lr10m-tuned", f"ka-1m-tuned-lr-{lr:g}", "ka-1m-tuned", b, lr=lr)
                           for lr, b in ((4e-3, 2.01), (8e-3, 2.0))])
    write_results(in_tmp, [fake_result("main", f"tf-1m-seed{i}", "tf-1m", b, lr=8e-3, seed=i)
                           for i, b in enumerate((1.60, 1.62))])
    spec = groups.plan("main-tuned")[0]
    model, train = records.expected_configs(spec)
    write_results(in_tmp, [{**fake_result("main-tuned", spec.name, "ka-1m-tuned", 1.65, lr=8e-3), "model": model,
                            "train": train}])
    text = results.comparison_section("main-tuned", "BPC")
    assert cells(text, "ka-1m-tuned", "main-tuned")[3] == "0" and cells(text, "tf-1m", "main")[3] == "0, 1"
    assert cells(text, "ka-1m-tuned", "main-tuned")[7] == f"{1.65 - 1.61:+.4f}"  # against main's transformer
    assert "played no part" not in text  # no fresh seed yet
    write_results(in_tmp, [fake_result("main-tuned", f"ka-1m-tuned-seed{s}", "ka-1m-tuned", b, lr=8e-3, seed=s)
                           for s, b in zip(groups.TUNED_FRESH_SEEDS[:2], (1.66, 1.68), strict=True)])
    text = results.comparison_section("main-tuned", "BPC")
    assert cells(text, "its seeds that played no part in choosing it")[3:8] == [
        "3, 4", "1.6600, 1.6800", f"1.6700 ± {statistics.stdev([1.66, 1.68]):.4f}", "1.6700", "+0.0600"]
    write_results(in_tmp, [fake_result("pycode", "tf-1m-seed0", "tf-1m", 1.5, lr=8e-3),
                           fake_result("pycode-tuned", "ka-1m-tuned-seed0", "ka-1m-tuned", 1.6)])
    code = results.comparison_section("pycode-tuned", "BPB")  # against pycode's transformer
    assert cells(code, "ka-1m-tuned", "pycode-tuned")[7] == "+0.1000"
    intro = results.tuned_table()
    assert "dim=160" in intro and "clock=8" in intro and "self_coupling=False" in intro
    second = second_stage_section("lr10m-tuned", "lr-tuned", "ka-1m-tuned")  # no 3M sweep: "—", not invented
    assert cells(second, "0.004") == ["0.004", "—", "2.0100", ""] and cells(second, "0.008") == ["0.008", "—",
                                                                                                "2.0000", "✓"]


def test_the_tuned_su2_preset_is_its_screen_variant():
    """ka-su2-1m-tuned is retired screen-su2's "tuned" model exactly, and its studies train as the screen's best,
    "tuned-omega-lr-1", did: that screen run's recorded configs are its sweep's run's at the screen's rate."""
    if not (protocol.COMMITTED / "screen-su2").is_dir():
        pytest.skip("no committed results/")
    with protocol.at_root(protocol.COMMITTED):
        screen = {r["name"]: r for r in protocol.load_results("screen-su2")}
        best = screen["ka-su2-1m-tuned-omega-lr-1"]
        sweep = next(s for s in groups.plan("lr-su2-tuned") if s.train["lr"] == best["train"]["lr"])
    family, base = get_preset("ka-su2-1m")
    tuned = screen["ka-su2-1m-tuned"]["model_overrides"]
    assert apply_overrides(family, base, tuned) == get_preset("ka-su2-1m-tuned")[1]
    assert best["model_overrides"] == tuned
    assert best["train"]["omega_lr_mult"] == groups.SU2_TUNED_TRAIN["omega_lr_mult"]
    assert records._config_diffs(sweep, best["model"], best["train"]) == [] and sweep.eval_split == best["eval_split"]


def test_the_tuned_su2_stages_carry_its_training_setting(in_tmp):
    """lr-su2-tuned → lr10m-su2-tuned → main-su2-tuned (and budget40's and flops' runs of it) all train with ω at the
    base rate, each reading the last."""
    write_results(in_tmp, [{**fake_result("lr-su2-tuned", s.name, s.preset, b, lr=s.train["lr"]), "eval_split": "valid"}
                           for s, b in zip(groups.plan("lr-su2-tuned"), (2.40, 2.35, 2.38), strict=True)])
    second = groups.plan("lr10m-su2-tuned")
    assert [(s.train["lr"], s.eval_split) for s in second] == [(4e-3, "valid"), (8e-3, "valid")]
    write_results(in_tmp, [{**fake_result("lr10m-su2-tuned", s.name, s.preset, b, lr=s.train["lr"]),
                            "eval_split": "valid"} for s, b in zip(second, (2.20, 2.19), strict=True)])
    seeds = groups.plan("main-su2-tuned")
    assert [(s.train["seed"], s.train["lr"], s.eval_split) for s in seeds] == [(k, 8e-3, "test") for k in range(3)]
    # the budget curve and the equal-FLOP runs train it the same way, at its second stage's best rate (the other
    # presets' rates given)
    write_results(in_tmp, [{**fake_result(g, f"{p}-lr-0.004", p, 2.0, lr=4e-3), "eval_split": "valid"}
                           for g, p in (("lr", "ka-1m"), ("lr", "tf-1m"), ("lr10m-tuned", "ka-1m-tuned"))])
    longer = [s for g in ("budget40", "flops") for s in groups.plan(g) if s.preset == "ka-su2-1m-tuned"]
    assert [(s.name, s.train["lr"]) for s in longer] == [
        ("ka-su2-1m-tuned-40m", 8e-3), ("ka-su2-1m-tuned-flops-tf-10m", 8e-3), ("ka-su2-1m-tuned-flops-tf-40m", 8e-3)]
    ten = protocol.PROTOCOL["tokens"]
    assert longer[1].train["tokens"] == groups.flop_matched_tokens("ka-su2-1m-tuned", "tf-1m", ten)
    for s in (*groups.plan("lr-su2-tuned"), *second, *seeds, *longer):
        assert s.train["omega_lr_mult"] == groups.SU2_TUNED_TRAIN["omega_lr_mult"] == 1.0


def test_the_tuned_preset_is_its_confirm_candidate():
    """ka-1m-tuned is TUNED_CANDIDATE's model exactly, so confirm's runs of it are main-tuned's seeds 0-2 (twins)."""
    family, base = get_preset("ka-1m")
    assert apply_overrides(family, base, groups.VARIANTS[groups.TUNED_CANDIDATE]) == get_preset("ka-1m-tuned")[1]
    with protocol.at_root(protocol.COMMITTED):  # the committed runs, where present
        present = bool(protocol.load_results("confirm"))
        twins = {r["name"]: r.get("twin") for r in groups.with_twins("main-tuned")}
        main = {r["name"]: r.get("twin") for r in groups.with_twins("main")}
    if present:  # confirm is retired: its records still hold main-tuned's seeds 0-2 and main's ka-1m
        assert [main[f"ka-1m-seed{s}"] for s in range(3)] == ["confirm/ka-ff-proj-shared"] + [
            f"confirm/ka-ff-proj-shared-seed{s}" for s in (1, 2)]
        for seed in range(3):
            suffix = f"-seed{seed}" if seed else ""
            assert twins[f"ka-1m-tuned-seed{seed}"] == f"confirm/ka-{groups.TUNED_CANDIDATE}{suffix}"


@pytest.mark.parametrize("model,train,why", [
    (groups.RAW, {}, "model ff='angles' (spec 'lift')"),  # a leftover of an earlier default
    ({}, {"lr": 8e-3}, "train lr=0.008 (spec 0.004)"),  # a best lr that moved
])
def test_resuming_a_run_started_with_other_settings_is_refused(in_tmp, monkeypatch, model, train, why):
    """A leftover run directory must not be resumed (or re-evaluated) under a spec that differs from it."""
    from kuramoto_attention.models.presets import apply_overrides, get_preset
    from kuramoto_attention.training import train as train_module

    run_dir = in_tmp / "runs" / "main" / "ka-1m-seed0"
    (run_dir / "checkpoint.old").mkdir(parents=True)  # the crash-between-renames copy counts as a checkpoint
    (run_dir / "checkpoint.old" / "trainer_state.pt").write_text("")
    spec = protocol.Spec("main", "ka-1m-seed0", "ka-1m", {}, {"lr": 4e-3, "tokens": 1000})
    saved_model = dataclasses.asdict(apply_overrides("kuramoto", get_preset("ka-1m")[1], model))
    saved_train = dataclasses.asdict(train_module.train_config_from({**spec.train, **train}))
    saved = {"model": {"family": "kuramoto", **saved_model}, "train": saved_train}
    (run_dir / "run.json").write_text(json.dumps(saved))
    monkeypatch.setattr(experiment, "train", lambda *_a, **_k: pytest.fail("must not train"))
    with pytest.raises(ConfigError, match=re.escape(why)):
        experiment.run_spec(spec, None)


def test_stale_results_are_detected(in_tmp, capsys, monkeypatch):
    write_results(in_tmp, [fake_result("lr", f"{p}-lr-0.002", p, 2.0, lr=2e-3) for p in ("ka-1m", "tf-1m")])
    spec = groups.plan("main")[0]
    fresh = fake_result("main", spec.name, spec.preset, 1.9, lr=2e-3)
    fresh["model"], fresh["train"] = records.expected_configs(spec)
    assert records.mismatch(spec, fresh) is None
    # a moved default (here the preset's feed-forward) is caught even though the overrides are equal
    assert "model ff='angles'" in records.mismatch(spec, {**fresh, "model": {**fresh["model"], "ff": "angles"}})
    assert "lr=0.004" in records.mismatch(spec, {**fresh, "train": {**fresh["train"], "lr": 4e-3}})
    assert "model overrides" in records.mismatch(spec, {**fresh, "model_overrides": {"ff": "none"}})
    # a record made before a field existed counts at that field's first default, not at today's
    older = {k: v for k, v in fresh["model"].items() if k != "gates_input"}
    assert records.mismatch(spec, {**fresh, "model": older}) is None
    with monkeypatch.context() as m:
        m.setitem(records.RECORDED_BEFORE, "gates_input", "ff-proj")
        assert "gates_input='ff-proj'" in records.mismatch(spec, {**fresh, "model": older})
    # a retired field recorded at its default is what every model is now; at another value it is another model
    at_default = {**fresh, "model": {**fresh["model"], **retired.RETIRED_FIELDS},
                  "model_overrides": {"ff_wrap": False}}
    assert records.mismatch(spec, at_default) is None
    assert "ff_wrap=True (retired)" in records.mismatch(spec, {**fresh, "model": {**fresh["model"], "ff_wrap": True}})
    assert "bound='none'" in records.mismatch(spec, {**fresh, "model": {**fresh["model"], "bound": "none"}})
    write_results(in_tmp, [{**fresh, "train": {**fresh["train"], "lr": 4e-3}}])
    experiment.run_group("main", None, only=[spec.name])  # reported, not rerun (nothing to train here)
    assert "STALE (train lr=0.004" in capsys.readouterr().out



# groups whose plan reads runs that the committed results/ does not hold yet (the sphere's sweeps): each may refuse to
# plan, with its reason; any other group that refuses fails the test
NOT_YET_PLANNABLE = frozenset({"lr10m-sphere", "main-sphere"})


def test_every_planned_spec_builds():
    """Each group's specs (on the committed sweeps) give a valid model: e.g. no P ψ(θ) beside another input. A group
    that cannot plan fails, unless NOT_YET_PLANNABLE names it."""
    import torch

    refused = {}
    for group in (*groups.GROUPS, *groups.FROZEN):
        try:
            specs = groups.plan(group)
        except ConfigError as exc:
            refused[group] = str(exc)
            continue
        for spec in specs:
            family = get_preset(spec.preset)[0]
            cfg = apply_overrides(family, get_preset(spec.preset)[1], spec.model)
            with torch.device("meta"):  # shapes and checks only: no memory, no init cost
                build_model(family, cfg)
    unexpected = {g: why for g, why in refused.items() if g not in NOT_YET_PLANNABLE}
    assert not unexpected, f"groups that no longer plan: {unexpected}"


def test_committed_results_match_their_specs():
    """Every results/GROUP/NAME.json of a kept group records what its group's spec asks for: a moved default or best
    lr cannot leave an old run standing in for a new spec (a retired group's are checked at its commit)."""
    root = protocol.COMMITTED
    if not root.is_dir():
        pytest.skip("no committed results/")
    with protocol.at_root(root):  # the plans read the committed sweeps
        _check_committed(root, {**groups.GROUPS, **groups.FROZEN})


def _check_committed(root, known):
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and p.name != bench.ARCHIVE.name):  # bench's runs
        if folder.name in retired.RETIRED:
            continue
        assert folder.name in known, f"results/{folder.name} is not an experiment group"
        specs = {s.name: s for s in groups.plan(folder.name)}
        for r in protocol.load_results(folder.name):
            assert r["name"] in specs, f"{folder.name}/{r['name']} is in no plan"
            assert records.mismatch(specs[r["name"]], r) is None, (folder.name, r["name"])


def test_a_spec_already_run_in_another_group_is_reused_and_marked(in_tmp, capsys):
    write_results(in_tmp, [fake_result("lr", f"{p}-lr-0.002", p, 2.0, lr=2e-3) for p in ("ka-1m", "tf-1m")])
    write_results(in_tmp, [fake_result("lr-wrapped", "ka-1m-lr-0.004", "ka-1m", 2.0, lr=4e-3, **groups.RAW,
                                       ff_wrap=True)])
    twin_spec = next(s for s in groups.plan("main-raw") if s.name == "ka-1m-seed0")
    twin = fake_result("main-raw", "ka-1m-seed0", "ka-1m", 2.4, lr=4e-3, **groups.RAW)
    twin["model"], twin["train"] = records.expected_configs(twin_spec)
    write_results(in_tmp, [twin, fake_result("main", "ka-1m-seed0", "ka-1m", 2.3, lr=2e-3)])
    spec = next(s for s in groups.plan("ablation") if s.name == "ka-ff-angles")
    # the ablation runs at the current sweep's lr, 2e-3 here, not 4e-3
    assert records.same_run(spec, groups.all_results()) is None
    write_results(in_tmp, [fake_result("lr", "ka-1m-lr-0.004", "ka-1m", 1.0, lr=4e-3)])  # now the best lr is 4e-3
    spec = next(s for s in groups.plan("ablation") if s.name == "ka-ff-angles")
    assert records.same_run(spec, groups.all_results())["group"] == "main-raw"
    experiment.run_group("ablation", None, only=["ka-ff-angles"])
    assert "already run as main-raw/ka-1m-seed0" in capsys.readouterr().out
    assert "ka-ff-angles (= main-raw/ka-1m-seed0" in results.ablation_section()


def test_confirm_section_compares_with_the_model_each_candidate_changes(in_tmp):
    def trained(r: dict) -> dict:  # at the default phase rate: a run's changes are its overrides alone
        return {**r, "train": {**r["train"], "phase_lr_mult": protocol.TRAIN_DEFAULTS["phase_lr_mult"]}}

    rows = [fake_result("main-unprojected", f"ka-1m-seed{i}", "ka-1m", b, seed=i, **groups.UNPROJECTED)
            for i, b in enumerate([2.30, 2.32])]
    rows += [fake_result("main", f"tf-1m-seed{i}", "tf-1m", b, seed=i) for i, b in enumerate([2.14, 2.16])]
    rows += [fake_result("confirm", "ka-x" + (f"-seed{i}" if i else ""), "ka-1m", b, seed=i, shared_gates=True,
                         **groups.UNPROJECTED) for i, b in enumerate([2.27, 2.31])]
    write_results(in_tmp, [trained(r) for r in rows])
    ranked, text = results.confirm_sections()
    # run by run, against its reference: ka-1m on ψ(θ) itself (the confirm runs' pinned model) on the same seed
    assert cells(text, "ka-x")[1:] == ["shared_gates=True", "10.0M", "0.002", "enwik7/test", "2.2700", "—",
                                       "main-unprojected/ka-1m-seed0", "-0.0300"]
    assert cells(text, "ka-x-seed1")[7:] == ["main-unprojected/ka-1m-seed1", "-0.0100"]
    # over its seeds: its mean ± sd, ka-1m on ψ(θ)'s mean over the same seeds, the Δ and the gap to tf-1m's mean
    assert cells(ranked, "ka-x")[1:] == ["shared_gates=True", "0, 1", "2.2900 ± 0.0283", "2.3100", "-0.0200", "+0.1400"]


def test_moved_gap_section_ranks_candidates_by_their_seed_means(in_tmp):
    assert "No runs yet" in results.confirm_sections()[0]
    rows = [fake_result("main-unprojected", f"ka-1m-seed{i}", "ka-1m", b, seed=i) for i, b in enumerate([2.30, 2.32])]
    rows += [fake_result("main", f"tf-1m-seed{i}", "tf-1m", b, seed=i) for i, b in enumerate([2.14, 2.16])]
    rows += [fake_result("confirm", "ka-x", "ka-1m", 2.27, shared_gates=True),
             fake_result("confirm", "ka-x-seed1", "ka-1m", 2.31, seed=1, shared_gates=True),
             fake_result("confirm", "ka-y", "ka-1m", 2.26, clock=4),
             fake_result("confirm", "ka-y-lr", "ka-1m", 2.28, lr=4e-3, clock=4),  # another rate than main's
             fake_result("confirm", "ka-z-seed5", "ka-1m", 2.0, seed=5)]  # a seed main has not run: left out
    write_results(in_tmp, rows)
    text = results.confirm_sections()[0]
    assert "| ka-y-lr | clock=4, phase_lr_mult=1, lr=0.004 | 0 | 2.2800 (one seed) |" in text
    y = "| ka-y | clock=4, phase_lr_mult=1 | 0 | 2.2600 (one seed) | 2.3000 | -0.0400 | +0.1100 |"
    x = "| ka-x | shared_gates=True, phase_lr_mult=1 | 0, 1 | 2.2900 ± 0.0283 | 2.3100 | -0.0200 | +0.1400 |"
    assert y in text and x in text and text.index(y) < text.index(x) and "ka-z" not in text


def test_main_comparison_names_the_best_variant_over_its_seeds(in_tmp):
    rows = [fake_result("main", f"{p}-seed{i}", p, b + i / 100, seed=i)
            for i in (0, 1) for p, b in (("ka-1m", 2.30), ("tf-1m", 2.10))]
    write_results(in_tmp, rows)
    assert "| confirm |" not in results.comparison_section("main", "BPC")
    lag = groups.VARIANTS[groups.BEST_VARIANT]
    write_results(in_tmp, [fake_result("confirm", f"ka-{groups.BEST_VARIANT}" + (f"-seed{i}" if i else ""), "ka-1m",
                                       2.20 + i / 50, seed=i, **lag) for i in (0, 1)])
    assert "| confirm |" not in results.comparison_section("main", "BPC")  # two seeds are not enough
    write_results(in_tmp, [fake_result("confirm", f"ka-{groups.BEST_VARIANT}-seed2", "ka-1m", 2.21, seed=2, **lag)])
    text = results.comparison_section("main", "BPC")
    assert cells(text, "ka-1m", "main")[7] == "+0.2000"
    best = f"{groups.BEST_VARIANT} (phase_lag=True, self_coupling=False)"
    assert cells(text, best)[1:3] == ["confirm", "3"] and cells(text, best)[5:8] == ["2.2100 ± 0.0100", "2.2100",
                                                                                   "+0.1050"]
    # another candidate with a lower three-seed mean is named first, the base variant after it
    name = "phase-lag-no-self-coupling-lag"  # a retired candidate: its change is read from its recorded overrides
    write_results(in_tmp, [fake_result("confirm", f"ka-{name}" + (f"-seed{i}" if i else ""), "ka-1m", 2.15, seed=i,
                                       phase_lag=True, self_coupling=False, coupling_lag=True) for i in (0, 1, 2)])
    text = results.comparison_section("main", "BPC")
    other = f"{name} (phase_lag=True, self_coupling=False, coupling_lag=True)"
    assert cells(text, other)[5:8] == ["2.1500 ± 0.0000", "2.1500", "+0.0450"]
    assert text.index(other) < text.index(best)


def test_main_reads_an_identical_candidate_run_as_its_own(in_tmp):
    """After a candidate became the preset's default, main's ka-1m is that candidate's run (same config, seed,
    split): its result and its run directory (for gap, probe and dynamics) are the candidate's."""
    write_results(in_tmp, [fake_result("lr", f"{p}-lr-0.004", p, 2.0, lr=4e-3) for p in ("ka-1m", "tf-1m")])
    write_results(in_tmp, [fake_result("lr-unprojected", "ka-1m-lr-0.004", "ka-1m", 2.0, lr=4e-3,
                                       **groups.UNPROJECTED)])
    spec = next(s for s in groups.plan("main") if s.name == "ka-1m-seed0")
    # confirm (retired) ran it pinned to ψ(θ) with its own P; its record carries the retired fields at their defaults
    overrides = {**groups.UNPROJECTED, "ff_proj": "shared", "ff_hidden": 312}
    run = fake_result("confirm", "ka-ff-proj-shared", "ka-1m", 2.25, lr=4e-3, **overrides)
    model, run["train"] = records.expected_configs(spec)
    run["model"] = {**model, **retired.RETIRED_FIELDS}
    other = {**run, "name": "ka-ff-proj-shared-wrapped", "model": {**run["model"], "ff_wrap": True}}  # another model
    write_results(in_tmp, [run, other])
    main = {r["name"]: r for r in groups.with_twins("main")}
    assert main["ka-1m-seed0"]["twin"] == "confirm/ka-ff-proj-shared" and main["ka-1m-seed0"]["eval_bpc"] == 2.25
    assert records.run_dir_of(main["ka-1m-seed0"]) == in_tmp / "runs" / "confirm" / "ka-ff-proj-shared"
    assert "ka-1m-seed1" not in main  # not run anywhere
    assert cells(results.comparison_section("main", "BPC"), "ka-1m", "main")[3:5] == ["0", "2.2500"]


def test_superseded_section_reads_its_transformer_from_the_matching_group(in_tmp):
    assert cells(results.superseded_section(), "ka-1m on ψ(θ) itself", "main-unprojected")[4] == "not run"
    write_results(in_tmp, [fake_result("main-unprojected", f"ka-1m-seed{i}", "ka-1m", 2.30 + i / 100, seed=i,
                                       **groups.UNPROJECTED) for i in (0, 1)]
                  + [fake_result("main", "tf-1m-seed0", "tf-1m", 2.15),
                     fake_result("pycode", "tf-1m-seed0", "tf-1m", 1.60),
                     fake_result("pycode-unprojected", "ka-1m-seed0", "ka-1m", 1.87, **groups.UNPROJECTED)])
    text = results.superseded_section()
    assert cells(text, "ka-1m on ψ(θ) itself", "main-unprojected")[4:8] == [
        "2.3000, 2.3100", "2.3050 ± 0.0071", "2.3050", "+0.1550"]  # against main's transformer
    assert cells(text, "ka-1m on ψ(θ) itself", "pycode-unprojected")[4:8] == [
        "1.8700", "1.8700 (one seed)", "1.8700", "+0.2700"]  # against pycode's


def _sweep(tmp, groups_=("lr",)):
    write_results(tmp, [fake_result("lr", f"{p}-lr-0.002", p, 2.0, lr=2e-3) for p in ("ka-1m", "tf-1m")])


def test_run_says_the_order_and_how_long_and_dry_run_trains_nothing(in_tmp, capsys, monkeypatch):
    monkeypatch.setattr(experiment, "run_spec", lambda *_a: pytest.fail("a dry run must not train"))
    _sweep(in_tmp)
    experiment.run_group("main", None, dry_run=True)
    out = capsys.readouterr().out
    assert "order: lr → main" in out and "main: 6 runs, about" in out and "in all" in out
    assert "6 runs planned, 6 to train" in out and "ka-1m-seed0: would train (10,002,432 tokens)" not in out
    assert "would train" in out
    assert groups.order("main-tuned") == ["lr-tuned", "lr10m-tuned", "main-tuned"]
    assert groups.order("main-5m") == ["lr-5m-tuned", "scale", "main-5m"]  # scale retired: read, not run
    n, seconds, _ = experiment.estimate("main")  # from the committed runs' wall_s
    assert n == 6 and seconds > 0


def test_a_retired_group_in_the_order_is_read_with_its_rerun_not_planned(monkeypatch):
    """main-5m reads the retired scale: the order gives scale the commit that reruns it and never plans it; a group that
    cannot be planned is estimated and gets no rerun command."""
    asked = []
    monkeypatch.setattr(experiment, "estimate", lambda g: asked.append(g))  # None: every kept group unplannable
    text = experiment.describe("main-5m")
    assert asked == ["lr-5m-tuned", "main-5m"] and retired.RETIRED["scale"].rerun("scale") in text
    assert "lab run lr-5m-tuned" not in text and "lab run main-5m" not in text


def test_run_in_a_fresh_folder_says_to_run_the_sweep_first(tmp_path, monkeypatch, capsys):
    from lab.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["run", "main", "--out", "mine"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
    assert "`python -m lab run lr --out mine` first" in err and "order: lr → main" in err
    assert type(protocol.RESULTS)("results") == protocol.RESULTS  # --out lasts one command


def test_a_run_trained_elsewhere_and_scored_on_another_split_is_evaluated_not_retrained(in_tmp, monkeypatch, capsys):
    """A sweep's second stage scores its runs on valid; the seed-0 run at the chosen rate is the same training, scored
    on test: the runner evaluates the other group's checkpoint instead of training it again."""
    text = in_tmp / "tiny.txt"
    words = [b"kuramoto ", b"phase ", b"torus ", b"attention ", b"sync ", b"\n"]
    text.write_bytes(b"".join(words[(i * 7919) % 13 % 6] for i in range(3000)))  # valid and test differ
    train = {"corpus": f"text:{text}", "batch_size": 2, "context": 32, "tokens": 640, "warmup": 2, "eval_every": 5,
             "eval_batches": 1, "ckpt_every": 5, "precision": "fp32", "compile": False, "progress": False, "lr": 1e-2}
    monkeypatch.setitem(groups.GROUPS, "stage", lambda: [protocol.Spec("stage", "ka-a", "ka-tiny", {}, train, "valid")])
    monkeypatch.setitem(groups.GROUPS, "seeds", lambda: [protocol.Spec("seeds", "ka-s0", "ka-tiny", {}, train)])
    experiment.run_group("stage", None)
    stage = protocol.load_results("stage")[0]
    diag = stage["diagnostics"]  # per layer, the bound's drive beside its saturation
    assert len(diag["attn_drive"]) == len(diag["ff_drive"]) == len(diag["attn_saturation"]) == 2
    assert all(x >= 0 for x in diag["attn_drive"] + diag["ff_drive"])
    # each evaluation's window: its median gradient norm and the share of its steps the clip cut
    assert all(q["grad_norm"] > 0 and 0 <= q["clipped"] <= 1 for q in stage["curve"])
    rough = stage["clipping"]  # after the warmup (2 steps), how many were clipped, and where the gradient was
    assert rough["steps"] == 10 - 2 and 0 <= rough["clipped_steps"] <= 8 and "angles" in rough["parts"]["all"]
    assert all(0 <= v <= 1 for v in rough["parts"]["all"].values())
    monkeypatch.setattr(experiment, "train", lambda *_a, **_k: pytest.fail("must not train again"))
    experiment.run_group("seeds", None, dry_run=True)
    assert "ka-s0: would evaluate stage/ka-a's checkpoint on test" in capsys.readouterr().out
    experiment.run_group("seeds", None)
    out = capsys.readouterr().out
    assert "0 to train and 1 to evaluate from another group's training" in out
    assert "ka-s0: trained as stage/ka-a (same config and seed, scored on valid): evaluating" in out
    r = protocol.load_results("seeds")[0]
    assert r["trained_in"] == "stage/ka-a" and r["eval_split"] == "test" and r["eval_bpc"] != stage["eval_bpc"]
    assert r["curve"] == stage["curve"] and r["wall_s"] == stage["wall_s"] and r["params"] == stage["params"]
    assert records.run_dir_of(r) == protocol.RUNS / "stage" / "ka-a"
    assert records.mismatch(groups.plan("seeds")[0], r) is None  # a record of its own spec, not stale
    assert common.label(r) == "ka-s0 (= stage/ka-a, scored on test)"
    experiment.run_group("seeds", None)  # done now: nothing to evaluate again
    assert "ka-s0: done, skipping" in capsys.readouterr().out


def test_rerun_trains_recorded_runs_again_and_keeps_the_old(in_tmp, capsys, monkeypatch):
    _sweep(in_tmp)
    spec = groups.plan("main")[0]
    fresh = fake_result("main", spec.name, spec.preset, 1.9, lr=2e-3)
    fresh["model"], fresh["train"] = records.expected_configs(spec)
    write_results(in_tmp, [fresh])
    (in_tmp / "runs" / "main" / spec.name).mkdir(parents=True)
    trained = []

    def fake_run_spec(s, _data_dir, _trained=None):
        trained.append(s.name)
        write_results(in_tmp, [{**fresh, "eval_bpc": 1.8}])
        return {**fresh, "eval_bpc": 1.8}

    monkeypatch.setattr(experiment, "run_spec", fake_run_spec)
    experiment.run_group("main", None, only=[spec.name])
    assert trained == [] and f"{spec.name}: done, skipping" in capsys.readouterr().out
    experiment.run_group("main", None, only=[spec.name], rerun=True)
    assert trained == [spec.name]
    assert (in_tmp / "results" / "main" / f"{spec.name}.json.replaced").exists()
    assert (in_tmp / "runs" / "main" / f"{spec.name}.replaced").is_dir()
    assert "kept as" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="plans no run nope"):
        experiment.run_group("main", None, only=["nope"])


@pytest.mark.parametrize("argv,needle", [
    (["report"], "no results in results/: nothing to report"),
    (["report", "--out", "elsewhere"], "no results in elsewhere/results/"),
    (["run", "screen"], "screen is retired"),
    (["dynamics", "--rerun"], "--rerun and --dry-run go with run"),
])
def test_lab_user_errors_are_one_line(argv, needle, tmp_path, monkeypatch, capsys):
    from lab.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and needle in err, err
    assert not (tmp_path / "RESULTS.md").exists()  # no placeholder


def test_studies_without_trained_runs_say_what_to_train(in_tmp, capsys):
    """A fresh clone has the results, not the models: gap and dynamics say which runs are missing and how to train
    them, in one line (no traceback, no "pass a run directory" the user did not name)."""
    from lab.cli import main

    write_results(in_tmp, [fake_result("main", f"{p}-seed0", p, 2.0) for p in ("ka-1m", "tf-1m")])
    for argv in (["gap"], ["dynamics", "main"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and "\n" not in err and "needs trained models" in err, err
        assert "python -m lab run main" in err and "pass a run directory" not in err
    write_results(in_tmp, [{**fake_result("confirm", "ka-x", "ka-1m", 2.0)}])
    from lab.studies import missing_runs

    with pytest.raises(ConfigError, match="git checkout 7d67ce1 && kuramoto experiment run confirm"):
        missing_runs([in_tmp / "runs" / "confirm" / "ka-x"], "probe")


def _curve(tokens, start=3.0, end=1.5, overfit_at=None):
    pts = []
    for i in range(1, 11):
        t = tokens * i // 10
        valid = start + (end - start) * i / 10
        train = valid - 0.05 if overfit_at and t >= overfit_at else valid + 0.05
        pts.append({"tokens": t, "elapsed_s": 10.0 * i, "valid_bpc": valid, "train_bpc": train})
    return pts


def test_budget_and_compute_sections_render_without_and_with_the_issue_26_runs(in_tmp):
    from lab.writers import compute, summary

    assert "No runs yet" in compute.budget_section()
    text = compute.flops_section()
    assert "No results of flops here: `python -m lab run flops" in text
    rows = [fake_result("main", f"{p}-seed0", p, b, lr=lr) for p, b, lr in (("ka-1m", 2.2, 4e-3),
                                                                          ("tf-1m", 2.1, 8e-3))]
    rows.append(fake_result("main-tuned", "ka-1m-tuned-seed0", "ka-1m-tuned", 2.12, lr=4e-3))
    write_results(in_tmp, rows)
    text = compute.budget_section()
    assert "`python -m lab run budget40`" in text and "| 10M | ka-1m-tuned | main-tuned/ka-1m-tuned-seed0 |" in text
    assert "| +0.0200 |" in text
    b40 = [{**fake_result("budget40", f"{p}-40m", p, b), "tokens": 40_001_536, "curve": _curve(40_001_536, end=b,
                                                                                         overfit_at=20_000_000)}
           for p, b in (("tf-1m", 1.9), ("ka-1m-tuned", 1.95), ("ka-1m", 2.05))]
    eq = {**fake_result("flops", "ka-1m-tuned-flops-tf-10m", "ka-1m-tuned", 2.2), "tokens": 6_000_000,
          "curve": _curve(6_000_000, end=2.2)}
    write_results(in_tmp, [*b40, eq])
    text = compute.budget_section()
    assert "| 40M | ka-1m-tuned | budget40/ka-1m-tuned-40m | test | 1.9500 | +0.0500 |" in text
    assert "`python -m lab run budget40`" not in text and "`python -m lab run budget100`" in text
    # valid − train within the first pass (8M of 9M training bytes) and at the end (4.4 passes); valid never rose
    assert "| -0.050 (0.9) | +0.050 (4.4) | — |" in text
    write_results(in_tmp, [{**fake_result("budget100", "tf-1m-100m", "tf-1m", 1.7), "tokens": 100_000_768},
                           fake_result("lr", "tf-1m-lr-0.008", "tf-1m", 2.5, lr=8e-3)])
    text = compute.budget_section()
    assert "| 100M | tf-1m | budget100/tf-1m-100m | test | 1.7000 | — |" in text and "budget100`" not in text
    per = groups.flops_per_token("ka-1m-tuned")
    assert select.flops_per_token(b40[1]) == per and common.fmt_flops(per * 40_001_536) in text
    text = compute.flops_section()
    # at tf-1m's 10M-token FLOPs: its tokens, training FLOPs and test BPC, and its gap to tf-1m's 10M run
    assert cells(text, "ka-1m-tuned-flops-tf-10m")[1:] == [
        "6.00M", common.fmt_flops(select.training_flops(eq)), "2.2000", "+0.1000"]
    plots = compute.plots()
    assert plots["budget"].stat().st_size > 1000 and plots["compute"].stat().st_size > 1000
    text = summary.budget_section(plots, lambda p: p.name)
    assert cells(text, "40M")[2] == "1.9500 (+0.050)" and "![budget](budget.png)" in text
    # each preset's model FLOPs per token, its gap at 10M at equal tokens and at tf-1m's 10M-token FLOPs
    assert cells(text, "10M")[2] == "2.1200 (+0.020)"  # the gap at equal tokens, in the first table
    assert cells(text, "ka-1m-tuned")[1:3] == [common.fmt_per_token(per), "+0.1000"]


def test_the_compute_plots_seconds_come_from_the_benchs_side_by_side_rates(in_tmp):
    from lab.writers import compute

    assert select.bench_rates(("ka-1m", "tf-1m")) is None and compute.bench_table() == ""
    row = {"mode": "compile", "precision": "bf16", "ka": {"preset": "ka-1m", "median": 20_000.0},
           "tf": {"preset": "tf-1m", "median": 25_000.0}}
    other = {**row, "precision": "fp32", "ka": {"preset": "ka-1m", "median": 1.0}}  # another mode: not read
    failed = {"pair": "ka-1m vs tf-1m", "mode": "compile", "precision": "bf16", "error": "no C++ compiler"}
    (in_tmp / "results").mkdir(exist_ok=True)
    (in_tmp / "results" / "bench.json").write_text(json.dumps({"training": [failed, other, row],
                                                               "machine": {"load_average_at_start": 0.25}}))
    assert select.bench_rates(("ka-1m", "tf-1m")) == {"ka-1m": 20_000.0, "tf-1m": 25_000.0}
    assert select.bench_rates(("ka-1m-tuned", "tf-1m")) is None
    text = compute.bench_table()
    assert cells(text, "ka-1m / tf-1m, bench (compile bf16)")[1] == "20,000 / 25,000"
    assert cells(text, "bench load average at its start")[1] == "0.25"


def test_memorisation_cells_give_the_gap_with_its_passes_and_the_rise_with_where_it_began():
    from lab.writers import compute

    passes = select.TRAIN_BYTES
    pts = [{"tokens": t, "train_bpc": tr, "valid_bpc": v}
           for t, tr, v in ((passes // 2, 2.4, 2.5), (passes, 2.2, 2.3), (2 * passes, 1.9, 2.2),
                            (3 * passes, 1.8, 2.25))]
    rose = f"+0.050 ({2 * passes / 1e6:.1f}M)"
    assert compute.overfit_cells({"curve": pts}) == ["+0.100 (1.0)", "+0.450 (3.0)", rose]
    assert compute.overfit_cells({"curve": pts[:1]}) == ["—", "+0.100 (0.5)", "—"]  # valid still falling
    assert compute.overfit_cells({}) == ["—"] * 3


def test_clipping_counts_the_clipped_steps_after_the_warmup_and_where_their_gradient_was():
    from lab.runner import clipping

    rows = [{"step": 1, "grad_norm": 9.0, "part_grad_norms": {"ff": 9.0, "angles": 0.0}},  # in the warmup: left out
            {"step": 2, "grad_norm": 5.0, "part_grad_norms": {"ff": 4.0, "angles": 3.0}},  # clipped: 16/25, 9/25
            {"step": 3, "grad_norm": 0.5, "part_grad_norms": {"ff": 0.3, "angles": 0.4}},
            {"step": 4, "grad_norm": 0.5, "part_grad_norms": {"ff": 0.3, "angles": 0.4}},
            {"step": 4, "valid_bpc": 2.0}]  # an evaluation's own row, and a run logged before part norms: none
    c = clipping(rows, 1.0, warmup=1)
    assert (c["clip"], c["after_step"], c["steps"], c["clipped_steps"]) == (1.0, 1, 3, 1)
    assert c["parts"]["clipped"] == pytest.approx({"ff": 0.64, "angles": 0.36})
    assert c["parts"]["all"] == pytest.approx({"ff": 0.36, "angles": 0.64})
    assert clipping(rows[4:], 1.0, 1) is None and clipping(rows, 0.0, 1) is None
    older = [{k: v for k, v in r.items() if k != "part_grad_norms"} for r in rows]  # logged before the parts' norms
    assert clipping(older, 1.0, 1) == {"clip": 1.0, "after_step": 1, "steps": 3, "clipped_steps": 1}


def test_a_result_recorded_before_a_log_field_gets_it_from_its_runs_log(in_tmp, monkeypatch, capsys):
    """A finished run whose result predates the curve's gradient norms or clipping: the next `run` of its group
    reads them from the run's metrics.jsonl, once, without training, and keeps everything else; a log that is not
    the recorded run's (another validation curve) changes nothing."""
    text = in_tmp / "tiny.txt"
    text.write_bytes(b"kuramoto phase torus attention sync\n" * 100)
    train = {"corpus": f"text:{text}", "batch_size": 2, "context": 16, "tokens": 320, "warmup": 2, "eval_every": 5,
             "eval_batches": 1, "ckpt_every": 5, "precision": "fp32", "compile": False, "progress": False}
    monkeypatch.setitem(groups.GROUPS, "old", lambda: [protocol.Spec("old", "tf-a", "tf-tiny", {}, train)])
    experiment.run_group("old", None)
    path = protocol.RESULTS / "old" / "tf-a.json"
    full = json.loads(path.read_text())
    assert "clipping" in full and full["curve"][0]["clipped"] is not None
    old = {**full, "curve": [{k: v for k, v in q.items() if k not in ("grad_norm", "clipped")} for q in full["curve"]]}
    del old["clipping"]
    path.write_text(json.dumps(old))
    monkeypatch.setattr(experiment, "train", lambda *_a, **_k: pytest.fail("must not train again"))
    experiment.run_group("old", None)
    assert "tf-a: added what its log holds" in capsys.readouterr().out
    assert json.loads(path.read_text()) == full
    experiment.run_group("old", None)  # nothing left to add
    assert "added" not in capsys.readouterr().out
    path.write_text(json.dumps({**old, "valid_curve": [[5 * 32, 9.0]]}))  # not this log's run
    experiment.run_group("old", None)
    assert json.loads(path.read_text())["valid_curve"] == [[5 * 32, 9.0]]
