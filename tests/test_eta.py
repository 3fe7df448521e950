"""The ETA of an index run (`Throughput`): it settles on a shared machine whose rounds swing 2x from one to the
next, and still follows a lasting change of speed. The issue saw a 7-minute index's ETA swing between 2:29 and
5:48; here a run of 1-second rounds at alternating speeds (the machine as other processes come and go)."""

from __future__ import annotations

import random

import pytest

from saipling.indexing.records import Throughput


def etas(rates: list[float], total: float) -> list[float]:
    """The ETA after each 1-second round at the given speeds (units a second), for `total` units of work."""
    meter, done, out = Throughput(), 0.0, []
    for r in rates:
        meter.add(r, 1.0)
        done += r
        eta = meter.eta(total - done)
        assert eta is not None
        out.append(eta)
    return out


@pytest.mark.parametrize("seed", range(10))
def test_the_eta_settles_when_rounds_swing(seed: int) -> None:
    rng = random.Random(seed)
    rates = [rng.choice([100.0, 200.0]) * rng.uniform(0.9, 1.1) for _ in range(420)]  # mean ~150 units/s
    shown = etas(rates, sum(rates))
    # after the first half minute, each second the ETA moves by about the second that passed, give or take
    # a few (it moved by up to 80 s with the old average of the last few rounds)
    jumps = [abs(shown[i] - (shown[i - 1] - 1.0)) for i in range(30, len(shown))]
    assert max(jumps) < 20.0, max(jumps)
    assert sorted(jumps)[len(jumps) // 2] < 3.0  # the median move
    # and it is right: at 10%, 25% and 50% of the run, within 20% of the time actually left
    for at in (42, 105, 210):
        left = len(rates) - (at + 1)
        assert abs(shown[at] - left) <= 0.2 * left, (at, shown[at], left)


def test_the_eta_follows_a_lasting_slowdown() -> None:
    rates = [200.0] * 120 + [100.0] * 300  # the machine becomes busy for good after two minutes
    shown = etas(rates, sum(rates))
    # a minute after the change the estimate has moved most of the way: left = 240 s at 100/s
    assert shown[179] > 0.8 * 240, shown[179]
