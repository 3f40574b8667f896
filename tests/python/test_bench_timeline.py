"""bench/prefill_timeline.py's overlap of the two warpgroups' phases, on made-up stamps."""
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from bench import prefill_timeline as PT  # noqa: E402


def stamps(s_at, softmax_at):
    r = [1] * len(PT.STAMPS)
    r[PT.S_LANDED], r[PT.SOFTMAX] = s_at, softmax_at
    return r


def test_overlap_of_intervals():
    assert PT.overlap([(0, 10), (20, 30)], [(5, 25)]) == 10
    assert PT.overlap([(0, 10)], [(10, 20)]) == 0


def test_softmax_phases_in_step_and_apart():
    # CTA 0: warp 0 (warpgroup 0) and warp 4 (warpgroup 1) share sub-partition 0 (a stamp of 0 is "not
    # stamped": the clocks start at 1000). In step: the same spans.
    in_step = {(0, 0, t): stamps(1000 + 100 * t, 1040 + 100 * t) for t in range(3)}
    in_step.update({(0, 4, t): stamps(1000 + 100 * t, 1040 + 100 * t) for t in range(3)})
    assert PT.phase_overlap(in_step, PT.S_LANDED, PT.SOFTMAX) == (240, 240)
    # Apart: warpgroup 1's softmax half a tile later.
    apart = {(0, 0, t): stamps(1000 + 100 * t, 1040 + 100 * t) for t in range(3)}
    apart.update({(0, 4, t): stamps(1050 + 100 * t, 1090 + 100 * t) for t in range(3)})
    assert PT.phase_overlap(apart, PT.S_LANDED, PT.SOFTMAX) == (0, 240)
    # Warp 1 has no partner stamped: not counted.
    apart[(0, 1, 0)] = stamps(5, 9)
    assert PT.phase_overlap(apart, PT.S_LANDED, PT.SOFTMAX) == (0, 240)
