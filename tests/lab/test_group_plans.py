"""How the lab's groups plan from recorded results (lab/groups.py), on fabricated results."""

from conftest import write_results

from lab import groups


def score(group: str, name: str, bpc: float) -> dict:
    """The fields of a capacity record that planning reads."""
    return {"group": group, "name": name, "preset": "ka-1m-tuned", "eval_bpc": bpc}


def test_a_capacity_shape_joins_the_fixes_only_past_the_margin(in_tmp):
    assert groups.fixes() == groups.FIXES  # nothing recorded: the declared fixes alone
    base = 1.14
    gains = {"ff-wide": groups.CAPACITY_MARGIN + 0.005, "bank-wide": groups.CAPACITY_MARGIN - 0.005, "depth-5": -0.01}
    write_results(in_tmp, [score("capacity", "ka-1m-tuned-enwik6-20m", base)]
                  + [score("capacity-shape", groups.shape_run(s), base - g) for s, g in gains.items()])
    extra = {k: v for k, v in groups.fixes().items() if k not in groups.FIXES}
    assert extra == {"shape-ff-wide": groups.Fix(model=groups.CAPACITY_SHAPES["ff-wide"])}
    # a shape already trained at 40M stays planned (and reported) whatever its screen says later
    write_results(in_tmp, [score("fixes40", "shape-depth-5-40m", 2.0)])
    assert set(groups.fixes()) - set(groups.FIXES) == {"shape-ff-wide", "shape-depth-5"}
