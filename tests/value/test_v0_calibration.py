"""Calibration metrics (Brier, AUROC, ECE) and baselines on hand-computed inputs."""

import numpy as np
import pytest

from rl_jax.value import calibration

P = [0.1, 0.4, 0.4, 0.8]
R = [0.0, 0.5, 0.25, 1.0]


def test_brier_auroc_ece_by_hand():
  # Brier: (0.1^2 + 0.1^2 + 0.15^2 + 0.2^2) / 4.
  assert calibration.brier(P, R) == pytest.approx(0.020625)
  # Positives (rate >= 0.5): 0.4, 0.8; negatives: 0.1, 0.4. Pairs won: 1 + 0.5 (tie) + 1 + 1.
  assert calibration.auroc(P, R) == pytest.approx(3.5 / 4)
  # Bins of width 0.1: {0.1 | r 0}, {0.4, 0.4 | r 0.5, 0.25}, {0.8 | r 1}:
  # 1/4·0.1 + 2/4·|0.4 - 0.375| + 1/4·0.2.
  assert calibration.ece(P, R) == pytest.approx(0.0875)
  m = calibration.metrics(P, R, "v0")
  assert set(m) == {"v0/brier", "v0/auroc", "v0/ece"}


def test_auroc_extremes_and_one_class():
  assert calibration.auroc([0.1, 0.9], [0.0, 1.0]) == 1.0
  assert calibration.auroc([0.9, 0.1], [0.0, 1.0]) == 0.0
  assert np.isnan(calibration.auroc([0.2, 0.3], [1.0, 1.0]))
  assert calibration.ece([1.0, 1.0], [1.0, 1.0]) == 0.0  # p = 1 falls in the last bin


def test_baselines():
  rates = np.array([0.0, 1.0, 0.5])
  out = calibration.baselines(rates, support_y=np.array([0.25, 0.75]),
                              past_rates=np.array([0.0, np.nan, 0.5]))
  assert out["baseline_global_mean/brier"] == pytest.approx((0.25 + 0.25 + 0) / 3)
  # Own past rate where there is one (0, -, 0.5), the global mean 0.5 elsewhere.
  assert out["baseline_past_rate/brier"] == pytest.approx((0 + 0.25 + 0) / 3)
  assert out["baseline_past_rate/coverage"] == pytest.approx(2 / 3)


def test_logistic_regression_separates_a_separable_feature():
  x = np.array([[-2.0], [-1.0], [1.0], [2.0]])
  y = np.array([0.0, 0.0, 1.0, 1.0])
  w, b = calibration.logistic_regression(x, y, l2=0.1)
  p = 1 / (1 + np.exp(-(x[:, 0] * w[0] + b)))
  assert (p[2:] > 0.8).all() and (p[:2] < 0.2).all()
  out = calibration.baselines(y, support_y=y, support_x=x, query_x=x)
  assert out["baseline_logreg/auroc"] == 1.0


def test_value_v0_sweep_applies_to_the_ladder_config():
  from experiments.configs import ladder  # pylint: disable=import-outside-toplevel
  from experiments.sweeps import value_v0  # pylint: disable=import-outside-toplevel
  from rl_jax.train import config_check  # pylint: disable=import-outside-toplevel
  runs = value_v0.get_sweep()
  assert len(runs) == 3 and {r["seed"] for r in runs} == {0, 1, 2}
  for run in runs:
    config = ladder.get_config()
    config.update_from_flattened_dict({k: v for k, v in run.items() if k != "name"})
    config_check.check(config)
    assert config.value.v0.enabled
