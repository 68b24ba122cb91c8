"""The statistics of experiments/report.py over seeds: t intervals, paired differences and the
share of an oracle's gain that a method recovers.

Every interval is a two-sided 95% interval over seeds, returned as (mean, half-width); the
half-width is nan where it is undefined (fewer than two seeds).
"""

from __future__ import annotations

import numpy as np

# Two-sided 95% Student t quantiles by degrees of freedom (1-30); 1.96 beyond.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060,
         2.056, 2.052, 2.048, 2.045, 2.042)


def t975(dof: int) -> float:
  """The 0.975 quantile of Student's t with `dof` >= 1 degrees of freedom (1.96 past 30)."""
  return _T975[dof - 1] if dof <= len(_T975) else 1.96


def interval(values) -> tuple[float, float]:
  """(mean, half-width of the 95% t interval) of `values`; half-width nan for fewer than 2."""
  x = np.asarray(values, np.float64)
  if len(x) == 0:
    return float("nan"), float("nan")
  if len(x) < 2:
    return float(x.mean()), float("nan")
  return float(x.mean()), float(t975(len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))


def json_number(x):
  """A JSON number, or None for None, nan and inf (JSON has neither)."""
  return float(x) if x is not None and np.isfinite(x) else None


def paired(values: dict, other: dict) -> list[float]:
  """values[s] - other[s] for every seed s that both hold (dicts seed -> accuracy), by seed."""
  return [values[s] - other[s] for s in sorted(set(values) & set(other))]


def recovered_share(method: dict, oracle: dict, baseline: dict) -> dict:
  """The share of the oracle's gain over the baseline that the method recovers, with its 95%
  interval, over the seeds all three ran (dicts seed -> final accuracy).

  With per-seed paired differences d_m = method - baseline and d_o = oracle - baseline over n
  seeds, the share is the ratio of their means, R = mean(d_m) / mean(d_o) (not the mean of
  per-seed ratios, which blow up on a seed where the oracle barely gains). Its interval is the
  delta method's (the ratio estimator's linearised variance, Cochran, Sampling Techniques §6.4):
  R ± t(0.975, n - 1) · sd(d_m − R·d_o) / (sqrt(n) · mean(d_o)), the residual d_m − R·d_o keeping
  the seeds' pairing. That interval is only meaningful when the oracle's gain is resolved: when
  the 95% t interval of d_o lies below or touches 0 (as Fieller's exact interval for a ratio
  then is, it would be unbounded or the share of a loss), `resolved` is False and `ci95` inf.

  Returns {'share': R, 'ci95': half-width, 'seeds': n, 'resolved': bool}; share nan without a
  common seed or when mean(d_o) = 0, ci95 nan for n < 2.
  """
  seeds = sorted(set(method) & set(oracle) & set(baseline))
  n = len(seeds)
  d_m = np.array([method[s] - baseline[s] for s in seeds], np.float64)
  d_o = np.array([oracle[s] - baseline[s] for s in seeds], np.float64)
  if n == 0 or d_o.mean() == 0:
    return dict(share=float("nan"), ci95=float("nan"), seeds=n, resolved=False)
  share = float(d_m.mean() / d_o.mean())
  if n < 2:
    return dict(share=share, ci95=float("nan"), seeds=n, resolved=False)
  low = d_o.mean() - t975(n - 1) * d_o.std(ddof=1) / np.sqrt(n)
  if low <= 0:
    return dict(share=share, ci95=float("inf"), seeds=n, resolved=False)
  se = (d_m - share * d_o).std(ddof=1) / (np.sqrt(n) * d_o.mean())
  return dict(share=share, ci95=float(t975(n - 1) * se), seeds=n, resolved=True)


def parse_oracles(spec: str | None, variants, baseline: str) -> dict[str, str]:
  """{variant: its oracle variant} from `--oracle`: one name (the oracle of every variant), or
  comma-separated `variant:oracle` pairs, a bare name among them being the default for the
  variants not named. A pair may name its family's own baseline, `variant:oracle:baseline`
  (`oracle_baselines`). The baselines and the oracles themselves get none. Unknown names
  raise."""
  default, pairs, bases = _parse_oracle_spec(spec, variants)
  oracles = {*pairs.values(), default}
  out = {v: pairs.get(v, default) for v in variants
         if v != baseline and v not in oracles and v not in bases.values()}
  return {v: o for v, o in out.items() if o is not None}


def oracle_baselines(spec: str | None, variants, baseline: str) -> dict[str, str]:
  """{variant: the baseline its share is measured from}: the third field of a
  `variant:oracle:baseline` pair of `--oracle`, else `baseline` (the report's)."""
  _, _, bases = _parse_oracle_spec(spec, variants)
  return {v: bases.get(v, baseline) for v in parse_oracles(spec, variants, baseline)}


def _parse_oracle_spec(spec: str | None, variants) -> tuple:
  """(default oracle, {variant: oracle}, {variant: baseline}) of `--oracle`; raises for two
  defaults, a malformed pair or a name that is not among `variants`."""
  default, pairs, bases = None, {}, {}
  for item in (x.strip() for x in (spec or "").split(",") if x.strip()):
    if ":" in item:
      parts = [x.strip() for x in item.split(":")]
      if len(parts) > 3 or not all(parts):
        raise ValueError(f"--oracle={spec!r}: {item!r} is not variant:oracle or "
                         "variant:oracle:baseline")
      pairs[parts[0]] = parts[1]
      if len(parts) == 3:
        bases[parts[0]] = parts[2]
    elif default is None:
      default = item
    else:
      raise ValueError(f"--oracle={spec!r} names two default oracles ({default!r}, {item!r}); "
                       "give the others as variant:oracle")
  variants = list(variants)
  unknown = sorted({v for v in pairs if v not in variants} |
                   {o for o in [*pairs.values(), *bases.values(), default]
                    if o is not None and o not in variants})
  if unknown:
    raise ValueError(f"--oracle={spec!r} names {unknown}, which are not variants of these runs; "
                     f"expected names from {sorted(variants)}")
  return default, pairs, bases
