"""The statistics of experiments/report.py over seeds: t intervals, paired differences and the
share of an oracle's gain that a method recovers.

Every interval is a two-sided 95% interval over seeds, returned as (mean, half-width); the
half-width is nan where it is undefined (fewer than two seeds).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

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


def pm(mean: float, half: float, fmt: str = "{:.3f}") -> str:
  """'mean ± half' for a table cell; the mean alone where half is nan, '-' where mean is nan."""
  if np.isnan(mean):
    return "-"
  return fmt.format(mean) if np.isnan(half) else f"{fmt.format(mean)} ± {fmt.format(half)}"


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


# --- Several SFT draws: the SFT as a random effect, corrected p-values, Fieller, sign test ---
#
# A sweep with several SFT draws has runs keyed by (sft, seed). Its paired differences
# d[s, r] = method[s, r] - baseline[s, r] follow d = mu + a_s + e_sr, with a_s the SFT draw's
# effect (variance sigma_sft^2) and e_sr the RL seed's (sigma_seed^2). `effect` estimates mu by
# the two-stage analysis of this nested design: the mean over the SFT draws of each draw's mean
# over seeds, with a Student t interval over those S means (S - 1 degrees of freedom). For a
# balanced design this is the REML mixed model's estimate and interval whenever the estimated
# sigma_sft^2 is positive, and conservative when it is not; it is exact under normality. A
# hierarchical bootstrap was not chosen: with 3 or 4 SFT draws a resample of draws has at most
# 35 distinct values and its standard error shrinks by sqrt((S - 1) / S), so it under-covers.
# With one SFT draw (every earlier sweep) the seeds are the units, as before.


def unit(key) -> tuple:
  """A run's unit as (sft, seed): a (sft, seed) tuple as it is, a bare seed as (None, seed), and
  the text forms of report JSON keys, 'S/R' and 'R'."""
  if isinstance(key, tuple):
    return key
  if isinstance(key, str) and "/" in key:
    sft, seed = key.split("/")
    return int(sft), int(seed)
  return None, int(key)


def unit_text(key) -> str:
  """The JSON key of a unit: 'R' for a bare seed or one of an unnamed SFT, else 'S/R'."""
  sft, seed = unit(key)
  return str(seed) if sft is None else f"{sft}/{seed}"


def _clusters(values: dict) -> dict:
  """{sft: [values of its seeds, by seed]} of a dict unit -> value."""
  out: dict = {}
  for key in sorted(values, key=lambda k: tuple(-1 if x is None else x for x in unit(k))):
    out.setdefault(unit(key)[0], []).append(values[key])
  return out


def t_sf(t: float, dof: int) -> float:
  """P(T > t) for Student's t with `dof` degrees of freedom."""
  return float(stats.t.sf(t, dof))


def t_quantile(q: float, dof: int) -> float:
  return float(stats.t.ppf(q, dof))


def effect(diffs: dict, direction: str = "two-sided", level: float = 0.95) -> dict:
  """The mean paired difference over units (dict unit -> difference), the SFT as a random
  effect: see the section comment. With two or more SFT draws the replicates are the draws'
  means; with one, the seeds.

  Returns {'mean', 'ci' (half-width of the two-sided `level` interval), 'dof', 'p' (the test of
  mu = 0 against `direction`: 'greater', 'less' or 'two-sided'), 'sfts', 'units', 'sd_sft',
  'sd_seed' (the variance components' square roots, one-way ANOVA, sd_sft None with one draw),
  'higher' (units with d > 0), 'sign_p' (`sign_test`)}; nan where undefined."""
  clusters = _clusters(diffs)
  sfts = len(clusters)
  reps = ([float(np.mean(v)) for v in clusters.values()] if sfts > 1 else
          [float(x) for v in clusters.values() for x in v])
  n = len(reps)
  mean = float(np.mean(reps)) if n else float("nan")
  nan = float("nan")
  ci, p, dof = nan, nan, n - 1
  if n > 1:
    se = float(np.std(reps, ddof=1) / np.sqrt(n))
    ci = (t975(dof) if level == 0.95 else t_quantile(0.5 + level / 2, dof)) * se
    if se > 0:
      t = mean / se
      p = {"greater": t_sf(t, dof), "less": t_sf(-t, dof),
           "two-sided": 2 * t_sf(abs(t), dof)}[direction]
    else:
      p = 0.0 if (mean > 0 if direction == "greater" else mean < 0 if direction == "less"
                  else mean != 0) else 1.0
  within = [x - np.mean(v) for v in clusters.values() for x in v]
  dof_w = len(within) - sfts
  sd_seed = float(np.sqrt(np.sum(np.square(within)) / dof_w)) if dof_w > 0 else nan
  sd_sft = None
  if sfts > 1:
    sizes = np.array([len(v) for v in clusters.values()], np.float64)
    means = np.array([np.mean(v) for v in clusters.values()])
    ms_between = float(np.sum(sizes * (means - np.average(means, weights=sizes)) ** 2)
                       / (sfts - 1))
    n0 = (sizes.sum() - np.sum(sizes ** 2) / sizes.sum()) / (sfts - 1)
    var_sft = (ms_between - (sd_seed ** 2 if np.isfinite(sd_seed) else 0.0)) / n0
    sd_sft = float(np.sqrt(max(var_sft, 0.0)))
  values = [float(x) for v in clusters.values() for x in v]
  higher = sum(x > 0 for x in values)
  return dict(mean=mean, ci=ci, dof=dof, p=p, sfts=sfts, units=len(values), sd_sft=sd_sft,
              sd_seed=sd_seed, higher=higher,
              sign_p=sign_test(higher, sum(x != 0 for x in values)))


def sign_test(k: int, n: int) -> float:
  """The exact two-sided binomial sign test's p-value of k positives among n non-zero
  differences (1.0 for n = 0): min(1, 2 min(P(X <= k), P(X >= k))), X ~ Bin(n, 1/2)."""
  if n == 0:
    return 1.0
  return float(min(1.0, 2 * min(stats.binom.cdf(k, n, 0.5), stats.binom.sf(k - 1, n, 0.5))))


def holm(pvalues: dict) -> dict:
  """Holm's step-down adjusted p-values of {name: p}: sorted ascending, the i-th (from 0) of m is
  max over j <= i of min(1, (m - j) p_(j)). nan p-values stay nan and do not count in m."""
  finite = sorted((p, k) for k, p in pvalues.items() if np.isfinite(p))
  m, out, running = len(finite), {k: float("nan") for k in pvalues}, 0.0
  for i, (p, k) in enumerate(finite):
    running = max(running, min(1.0, (m - i) * p))
    out[k] = running
  return out


def fieller(num: dict, den: dict, level: float = 0.95) -> dict:
  """Fieller's interval for mean(num) / mean(den) over paired units (dicts unit -> value; the
  SFT draws' means are the replicates when there are several, as in `effect`).

  With means a, b, their variances v_aa, v_bb and covariance v_ab (sample moments of the
  replicates / n) and t = t(0.5 + level / 2, n - 1), the interval is the set of R with
  (a - R b)^2 <= t^2 (v_aa - 2 R v_ab + R^2 v_bb): bounded exactly when b^2 > t^2 v_bb (the
  denominator's mean is resolved from 0). Returns {'ratio', 'low', 'high', 'bounded', 'n'};
  low/high are -inf/inf when unbounded, nan for n < 2."""
  keys = sorted(set(num) & set(den), key=lambda k: tuple(-1 if x is None else x for x in unit(k)))
  cn, cd = _clusters({k: num[k] for k in keys}), _clusters({k: den[k] for k in keys})
  if len(cn) > 1:
    x = np.array([np.mean(v) for v in cn.values()])
    y = np.array([np.mean(v) for v in cd.values()])
  else:
    x = np.array([v for vs in cn.values() for v in vs], np.float64)
    y = np.array([v for vs in cd.values() for v in vs], np.float64)
  n = len(x)
  a, b = (float(x.mean()), float(y.mean())) if n else (float("nan"), float("nan"))
  ratio = a / b if n and b != 0 else float("nan")
  if n < 2:
    return dict(ratio=ratio, low=float("nan"), high=float("nan"), bounded=False, n=n)
  cov = np.cov(np.stack([x, y]), ddof=1) / n
  v_aa, v_ab, v_bb = cov[0, 0], cov[0, 1], cov[1, 1]
  t2 = (t975(n - 1) if level == 0.95 else t_quantile(0.5 + level / 2, n - 1)) ** 2
  qa = b * b - t2 * v_bb
  qb = -2 * (a * b - t2 * v_ab)
  qc = a * a - t2 * v_aa
  disc = qb * qb - 4 * qa * qc
  if qa <= 0 or disc < 0:
    return dict(ratio=ratio, low=float("-inf"), high=float("inf"), bounded=False, n=n)
  root = np.sqrt(disc)
  low, high = sorted(((-qb - root) / (2 * qa), (-qb + root) / (2 * qa)))
  return dict(ratio=ratio, low=float(low), high=float(high), bounded=True, n=n)


def _draw_means(values: dict) -> dict:
  """{sft: mean over its seeds} of (sft, seed)-keyed values from several SFT draws; unchanged
  for seed keys or a single draw (the seeds are then the replicates)."""
  if len({unit(k)[0] for k in values}) < 2:
    return values
  out: dict = {}
  for (sft, _), v in values.items():
    out.setdefault(sft, []).append(v)
  return {k: float(np.mean(v)) for k, v in out.items()}


def share(method: dict, oracle: dict, base: dict, base_name: str) -> dict:
  """The share of the oracle's gain recovered (`recovered_share`, over the SFT
  draws' means when there are several) with Fieller's 95% interval beside the delta method's."""
  common = set(method) & set(oracle) & set(base)
  out = dict(recovered_share(*(_draw_means({k: d[k] for k in common})
                               for d in (method, oracle, base))), baseline=base_name)
  f = fieller({k: method[k] - base[k] for k in common}, {k: oracle[k] - base[k] for k in common})
  out["fieller"] = (f["low"], f["high"])
  return out
