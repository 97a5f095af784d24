"""The loss-gap breakdown (`python -m lab gap`) on hand-made per-byte losses."""

import json
import math

import pytest
import torch
from rendered import cells

from kuramoto_attention import KuramotoConfig, KuramotoLM
from lab.studies import gap
from lab.writers import studies


def test_by_position_bins_and_means():
    ka = torch.tensor([[3.0, 2.0, 2.0, 1.0, 1.0]])
    tf = torch.tensor([[2.0, 2.0, 1.0, 1.0, 0.0]])
    rows = gap.by_position({"ka": ka, "tf": tf, "variant": tf + 0.25}, edges=(0, 1, 2, 4, 8))
    assert [(r["from"], r["to"]) for r in rows] == [(0, 1), (1, 2), (2, 4), (4, 5)]
    assert [r["ka_gap"] for r in rows] == pytest.approx([1.0, 0.0, 0.5, 1.0])
    assert [r["variant_gap"] for r in rows] == pytest.approx([0.25] * 4) and "tf_gap" not in rows[0]


def test_by_difficulty_groups_by_the_transformers_loss():
    tf = torch.arange(8, dtype=torch.float32)  # quartiles {0,1}, {2,3}, {4,5}, {6,7}
    ka = tf + torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 0.0, -1.0, -1.0])
    rows = gap.by_difficulty({"ka": ka, "tf": tf})
    assert [r["bytes"] for r in rows] == [2, 2, 2, 2]
    assert [r["ka_gap"] for r in rows] == pytest.approx([1.0, 0.0, 0.0, -1.0])
    assert rows[0]["tf"] == pytest.approx(0.5)


def test_bits_per_byte_is_the_cross_entropy_in_bits():
    model = KuramotoLM(KuramotoConfig(dim=8, depth=1, heads=2, ff_hidden=8))
    windows = torch.randint(0, 256, (2, 6))
    bits = gap.bits_per_byte(model, windows)
    assert bits.shape == (2, 5)
    logits = model(windows[:, :-1])
    nats = torch.nn.functional.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten())
    assert bits.mean().item() == pytest.approx(nats.item() / math.log(2), rel=1e-5)


def test_write_saves_the_measurements_and_the_report_renders_them(in_tmp):
    (in_tmp / "results").mkdir()
    bits = {"ka": torch.full((2, 6), 2.5), "tf": torch.full((2, 6), 2.0)}
    res = {"group": "main", "seeds": [0, 1], "windows_per_seed": 1, "context": 6, "ka_ff_proj": "shared", "ka": 2.5,
           "tf": 2.0, "variant_name": None, "by_position": gap.by_position(bits),
           "by_difficulty": gap.by_difficulty(bits)}
    path = gap.write(res)
    assert path.name == "gap.json" and path.read_text() == json.dumps(res, indent=1) + "\n"
    text = studies.gap_tables()["gap_main"]
    assert cells(text, "all, pooled")[1:] == ["2.500", "2.000", "+0.500"]  # ka, tf, the gap: no variant column
    assert cells(text, "0")[1:] == ["2.500", "2.000", "+0.500"] and cells(text, "4–5")[1:] == cells(text, "0")[1:]
    assert cells(text, "easiest quarter")[1:] == ["12", "2.500", "2.000", "+0.500"]  # one loss: every byte in it
    slots = studies.notebook_slots()
    assert (slots["gap_seeds"], slots["gap_windows"], slots["gap_context"], slots["gap_variant"]) == ("0, 1", 1, 6, "—")
    bits["variant"] = torch.full((2, 6), 2.25)  # with the best variant: a column and a gap of its own
    res.update(variant_name="x", variant=2.25, by_position=gap.by_position(bits), by_difficulty=gap.by_difficulty(bits))
    gap.write(res)
    text = studies.gap_tables()["gap_main"]
    assert cells(text, "all, pooled")[1:] == ["2.500", "2.250", "2.000", "+0.500", "+0.250"]
    assert cells(text, "0")[1:] == ["2.500", "2.250", "2.000", "+0.500", "+0.250"]
    assert studies.notebook_slots()["gap_variant"] == "x"


def test_recall_classes_mark_what_copying_predicts():
    # "abcd" recurs: after its second occurrence copying predicts "e" (right), after its third "e" again (wrong: "x")
    text = b"abcde--abcde--abcdx"
    classes = gap.recall_classes(torch.tensor([list(text)]), order=4)
    assert classes.shape == (1, len(text) - 1)
    assert classes[0, 10].item() == 1  # predicting text[11] = "e" after the second "abcd": copying is right
    assert classes[0, 17].item() == 2  # predicting "x" after the third "abcd": copying says "e"
    assert classes[0, :7].tolist() == [0] * 7  # nothing seen before the first repeat of a 4-byte context
    rows = gap.by_recall({"ka": classes.double() + 1, "tf": torch.ones(1, len(text) - 1)}, classes)
    assert {r["recall"]: r["ka_gap"] for r in rows} == {0: 0.0, 1: 1.0, 2: 2.0}
    assert sum(r["bytes"] for r in rows) == len(text) - 1


def test_write_budget_pair(in_tmp):
    (in_tmp / "results").mkdir()
    bits = {"tuned": torch.full((1, 6), 2.25), "tf": torch.full((1, 6), 2.0)}
    classes = torch.zeros(1, 6, dtype=torch.long)
    res = {"group": "budget40", "runs": {"tuned": "ka-1m-tuned-40m", "tf": "tf-1m-40m"}, "windows": 1, "context": 6,
           "tokens": {"tuned": 40_000_000, "tf": 40_000_000}, "tuned": 2.25, "tf": 2.0,
           "by_position": gap.by_position(bits), "by_difficulty": gap.by_difficulty(bits),
           "by_recall": gap.by_recall(bits, classes)}
    path = gap.write(res)
    assert path.name == "gap-budget40.json" and path.read_text() == json.dumps(res, indent=1) + "\n"
    text = studies.gap_tables()["gap_budget"]
    assert cells(text, "all, pooled")[1:] == ["2.250", "2.000", "+0.250"]  # ka-1m-tuned, tf-1m, its gap
    assert cells(text, "context new to the window")[1:] == ["6", "2.250", "2.000", "+0.250"]
    slots = studies.notebook_slots()
    assert (slots["gap_budget_tokens"], slots["gap_budget_windows"], slots["gap_budget_context"]) == ("40", 1, 6)


@pytest.mark.parametrize("argv,needle", [
    (["gap", "budget40"], "gap budget40 needs tf-1m-40m and a Kuramoto run of results/budget40"),
    (["gap"], "no seed with both ka-1m and tf-1m in results/main"),
    (["gap", "main", "confirm"], "gap takes one GROUP"),
    (["run"], "run needs one GROUP"),
    (["run", "main", "confirm"], "run needs one GROUP"),
])
def test_experiment_user_errors_are_one_line(argv, needle, tmp_path, monkeypatch, capsys):
    from lab.cli import main

    monkeypatch.chdir(tmp_path)  # no results/ here
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and needle in err
