"""trials_to_within: the trials a replayed strategy needs to come within 5% of a pool's best."""

from __future__ import annotations

import numpy as np

from tuner.search.simulate import trials_to_within


def test_first_trial_within_the_tolerance_averaged_over_seeds():
    # [seeds, pools, trials]: best-so-far fractions of each pool's best
    curves = np.array([
        [[0.0, 0.5, 0.96, 1.0], [0.9, 0.94, 0.94, 1.0]],
        [[0.953, 0.953, 1.0, 1.0], [0.5, 0.5, 0.5, 0.5]],
    ])
    got = trials_to_within(curves)
    # pool 0: trial 3 (0.96 >= 1/1.05 = 0.952...) and trial 1; pool 1: trial 4, and never
    assert got[0] == 2.0
    assert np.isnan(got[1])
    strict = trials_to_within(curves[:1], tolerance=0.0)
    assert list(strict) == [4.0, 4.0]
