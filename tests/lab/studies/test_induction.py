"""The synthetic copy task of ``python -m lab induction`` (lab/studies/induction.py)."""

import json
from dataclasses import replace

import torch
from rendered import cells

from lab.studies import induction

TINY = replace(induction.Task(), segment=8, alphabet=8, batch=4, steps=4, eval_every=2, eval_sequences=16, seeds=(0,))


def test_sequences_copy_the_segment_from_a_random_start():
    x = induction.sequences(TINY, 64, torch.Generator().manual_seed(0))
    length, half = TINY.segment, TINY.segment // 2
    assert x.shape == (64, 2 * length) and int(x.max()) < TINY.alphabet
    starts = set()
    for row in x:
        first, second = row[:length].tolist(), row[length:].tolist()
        s = next(s for s in range(half) if first[s:] == second[:length - s])
        starts.add(s)
    assert len(starts) > 1  # the offset varies, so position alone cannot find the source


def test_copy_accuracy_scores_only_the_predictions_a_source_determines():
    x = induction.sequences(TINY, 16, torch.Generator().manual_seed(0))

    class Oracle(torch.nn.Module):  # predicts every next symbol: logits one-hot on x shifted by one
        def forward(self, inp):
            return torch.nn.functional.one_hot(x[:, 1:inp.shape[1] + 1], TINY.alphabet).float()

    assert induction.copy_accuracy(Oracle(), x, TINY) == 1.0


def test_study_writes_its_measurements_and_the_report_renders_them(in_tmp):
    from lab import protocol
    from lab.writers.studies import induction_table, notebook_slots

    protocol.RESULTS.mkdir(parents=True)
    res = induction.measure(TINY, ("tf", "ka-cross-both"))
    path = induction.write(res)
    saved = json.loads((protocol.RESULTS / "induction.json").read_text())
    assert path.name == "induction.json" and saved == json.loads(json.dumps(res))
    assert [r["model"] for r in saved["runs"]] == ["tf", "ka-cross-both"]
    assert all(0 <= p["accuracy"] <= 1 for r in saved["runs"] for p in r["curve"])
    assert [p["step"] for p in saved["runs"][0]["curve"]] == [0, 2, 4]
    run = saved["runs"][1]  # one seed: its own curve, after the first evaluation
    first = next((f"{p['step']:,}" for p in run["curve"] if p["accuracy"] >= 0.5), "—")
    assert cells(induction_table(full=True), "ka-cross-both")[1:] == [
        f"{run['params']:,}", *(f"{p['accuracy']:.3f}" for p in run["curve"][1:]), first]
    slots = notebook_slots()
    assert [slots[f"induction_{k}"] for k in ("segment", "alphabet", "copied", "chance", "seeds", "lr")] == [
        8, 8, 4, "0.125", "0", "0.003"]


def test_results_line_reads_the_study(in_tmp):
    from lab import protocol
    from lab.writers.studies import induction_table

    assert "Not measured yet: `python -m lab induction`" in induction_table()
    protocol.RESULTS.mkdir(parents=True)
    induction.write(induction.measure(TINY, ("tf", "ka")))
    saved = json.loads((protocol.RESULTS / "induction.json").read_text())
    text = induction_table()
    assert "| copy task model (1 seeds, chance 0.125) | accuracy after 4 steps | first step at 0.5 |" in text
    for run in saved["runs"]:  # one seed: the mean is its own last accuracy
        assert cells(text, run["model"])[1] == f"{run['curve'][-1]['accuracy']:.3f}"


def test_an_unknown_model_is_refused():
    import pytest

    from kuramoto_attention.errors import ConfigError

    with pytest.raises(ConfigError, match="induction has no model 'ka-x'; choose from tf, ka, "):
        induction.measure(TINY, ("ka-x",))
