"""``python -m benchmarks.traffic``: the bytes a training step moves in copies, casts and fills, counted from the
operators autograd and the model actually run (no timing)."""

from benchmarks.traffic import traffic


def test_traffic_counts_each_moving_operator_by_its_caller_and_is_reproducible():
    first = traffic("ka-tiny", "fp32", batch=2, context=16)
    assert first and all(size > 0 for size in first.values())
    assert {name for name, _, _ in first} <= {"copy_", "_to_copy", "clone", "cat", "stack", "constant_pad_nd",
                                               "slice_backward", "select_backward", "fill_", "zero_", "new_zeros",
                                               "zeros", "contiguous"}
    assert any(where != "backward" for _, where, _ in first)  # forward ones are named by the library line
    assert traffic("ka-tiny", "fp32", batch=2, context=16) == first  # a count, not a timing


def test_a_copy_the_step_makes_is_counted_at_its_size():
    """Doubling the batch doubles every per-token copy: the count follows the tensors, not the clock."""
    small, large = (sum(traffic("tf-tiny", "fp32", batch=b, context=16).values()) for b in (2, 4))
    assert 1.5 * small < large <= 2 * small + 1_000_000
