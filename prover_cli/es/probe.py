"""`prover train es --probe`: before training, does the configured ES budget see any signal?

    prover train es --config configs/demo.toml --probe
    prover train es --config configs/demo.toml --probe --probe-seeds 8 --set es.problems_per_iteration=32

It scores the unperturbed center and the population of iteration 1 (the pairs training scores
first) at es.sigma and its two neighbours (es.sigma / 3 and x 3), each S times
(`--probe-seeds`, default 4). Scoring s uses the problems and the sampling seed of training
iteration s, the same for the center and every member, so each scoring is what one training
iteration would see (scoring 1 at es.sigma is exactly iteration 1's rewards). Per sigma:

- **signal share**: ICC(3,1) of the units x scorings table of mean rewards (es/signal.py): the
  share of the variance of one scoring's rewards that is the perturbations' own effect, at the
  configured J = es.problems_per_iteration x es.samples_per_problem samples per member. Given
  for the pairs' reward differences (what the antithetic update uses, and what `es/signal_share`
  estimates during training) and for the members' rewards. 1 = all signal, 0 = none, below 0.5
  the update is mostly noise.
- **per-iteration estimate**: `es/signal_share` as training computes it, from within each
  scoring's samples, pooled over the S scorings, with its jackknife error over them: the same
  quantity estimated the cheap way (a check on the estimator training relies on). Training pools
  only its last 5 iterations, whose error at 8 pairs is about 0.3: its sign can differ from the
  probe's while both are near 0; the run's share, on the progress line beside it, is the one
  that compares (es/signal.py).
- **curvature**: the members' mean reward and the center's (on their means over the S
  scorings), and how many members beat the center. Members far below the center mean sigma is
  large enough to break the model.
- **samples per member** that would lift the pairs' share to 0.5, by Spearman-Brown.
- **recommendation** with its reason. A sigma whose members keep less than KEEP_AT_LEAST of the
  center's reward is refused whatever its share: there the members' differences rank how badly
  each direction breaks the model, not which one improves it (the demo's sigma 0.03 had the
  largest share, 0.19, with members solving 0.011 against the center's 0.406). Of the others,
  the largest share is recommended; below 0.5 it is still mostly noise, and the advice says so.

It costs S x J x (1 + 3 x population) samples, printed before it starts, writes nothing (no
ledger, no metrics, no run directory) and leaves the weights as it found them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence, TypedDict

from prover_cli.es.signal import (NOISE_BELOW, iteration_variances, pooled_share, samples_for_share,
                                  share_error, single_scoring_share)
from prover_cli.es.population import load_es_sampler, member_completions, pick_problems
from prover_cli.tasks.problems import train_problems
from prover_cli.progress import NULL_REPORTER, Reporter
from prover_cli.policy import rollout
from prover_cli import streams
from prover_cli.tasks import get_task

if TYPE_CHECKING:
    from prover_cli.config import Config

DEFAULT_SEEDS = 4
SIGMA_FACTORS = (1 / 3, 1.0, 3.0)  # es.sigma and its neighbours, about half a decade apart
NOISE_ITERATION = 1                # the members probed: the perturbations of training iteration 1


class ProbeCost(TypedDict):
    """What `probe_cost` returns."""

    samples: int
    samples_per_member: int
    scorers: int
    iterations_of_training: float


def probe_cost(config: Config, seeds: int = DEFAULT_SEEDS) -> ProbeCost:
    """Samples the probe generates and scores: seeds x J x (1 center + 3 sigmas x population)."""
    es = config.es
    per_member = es.problems_per_iteration * es.samples_per_problem
    scorers = 1 + len(SIGMA_FACTORS) * es.population
    return {"samples": seeds * per_member * scorers, "samples_per_member": per_member, "scorers": scorers,
            "iterations_of_training": round(seeds * scorers / es.population, 1)}


def probe_es(config: Config, *, seeds: int = DEFAULT_SEEDS, reporter: Reporter = NULL_REPORTER) -> dict[str, Any]:
    if seeds < 2:
        raise ValueError("the probe needs at least 2 scorings to tell signal from noise")
    es = config.es
    sigmas = [es.sigma * factor for factor in SIGMA_FACTORS]
    cost = probe_cost(config, seeds)
    reporter.log(f"probe: {cost['samples']:,} samples = {seeds} scorings x {cost['samples_per_member']} samples x "
                 f"(the center + {len(sigmas)} sigmas x {es.population} members), about "
                 f"{cost['iterations_of_training']:g} training iterations; nothing is written")
    task = get_task(config.data.task)
    problems = train_problems(config)
    sampler = load_es_sampler(config)
    weights = sampler.es_weights()

    center: list[float] = []                                           # [scoring]
    members: dict[float, list[list[float]]] = {sigma: [[] for _ in range(es.population)] for sigma in sigmas}  # [member][scoring]
    per_iteration: dict[float, list[tuple[float, float] | None]] = {sigma: [] for sigma in sigmas}                    # (es/signal_var, es/noise_var) of each
    with reporter.task("probe es", total=seeds * cost["scorers"], unit="member") as bar:
        for scoring in range(1, seeds + 1):  # the problems and sampling seed of training iteration `scoring`
            batch = pick_problems(problems, config.run.seed, scoring, es.problems_per_iteration)
            seed = streams.es_sampling_seed(config.run.seed, scoring)
            scorers = [(0.0, 0)] + [(sigma, m) for sigma in sigmas for m in range(es.population)]
            texts = []
            for sigma, member in scorers:  # sigma 0: the center, cast(master) exactly
                texts.append(member_completions(sampler, weights, task, batch, config, NOISE_ITERATION, member,
                                                sigma=sigma, seed=seed))
                bar.advance(1)
            rewards = rollout.score(task, batch * len(scorers), [t for member in texts for t in member], config,
                                    reporter=reporter)
            per_member = len(rewards) // len(scorers)
            chunks = [rewards[i * per_member:(i + 1) * per_member] for i in range(len(scorers))]
            center.append(_mean(chunks[0]))
            for index, sigma in enumerate(sigmas):
                block = chunks[1 + index * es.population:1 + (index + 1) * es.population]
                for member, chunk in enumerate(block):
                    members[sigma][member].append(_mean(chunk))
                per_iteration[sigma].append(iteration_variances([r for chunk in block for r in chunk],
                                                                es.population, es.antithetic))

    rows = [sigma_row(sigma, members[sigma], center, per_iteration[sigma], es.antithetic,
                      cost["samples_per_member"]) for sigma in sigmas]
    recommended, advice = recommend(rows, cost["samples_per_member"], es.sigma)
    return {
        "ok": True,
        "samples": cost["samples"],
        "scorings": seeds,
        "samples_per_member": cost["samples_per_member"],
        "population": es.population,
        "center_reward": _mean(center),
        "center_rewards": center,
        "sigmas": rows,
        "recommended_sigma": recommended,
        "advice": advice,
        "ledger": "not written (the probe writes nothing)",
        "tables": [probe_table(rows, cost["samples_per_member"])],
    }


def sigma_row(sigma: float, member_table: list[list[float]], center: Sequence[float],
              per_iteration: Sequence[tuple[float, float] | None], antithetic: bool, samples: int) -> dict[str, Any]:
    """One sigma's figures from its members x scorings table of mean rewards."""
    population, seeds = len(member_table), len(center)
    pairs = [[a - b for a, b in zip(member_table[2 * k], member_table[2 * k + 1])]
             for k in range(population // 2)] if antithetic else None
    share_pairs = single_scoring_share(pairs) if pairs else None
    share_members = single_scoring_share(member_table)
    share = share_pairs if antithetic else share_members
    center_mean = _mean(center)
    member_means = [_mean(row) for row in member_table]
    member_reward = _mean(member_means)
    return {
        "sigma": sigma,
        "signal_share": share,                      # what the update uses: pairs (antithetic) or members
        "signal_share_pairs": share_pairs,
        "signal_share_members": share_members,
        "signal_share_per_iteration": pooled_share(per_iteration, window=seeds),
        "signal_share_per_iteration_error": share_error(per_iteration, window=seeds),
        "member_reward": member_reward,
        "center_reward": center_mean,
        # the members' reward as a share of the center's; None when the center scores nothing to lose
        "members_keep": member_reward / center_mean if center_mean > 0 else None,
        "members_minus_center": member_reward - center_mean,
        "members_above_center": sum(m > center_mean for m in member_means),
        "members": population,
        "samples_per_member_for_half": samples_for_share(share, samples) if share is not None else None,
        "member_rewards": member_table,
        "scorings": seeds,
    }


# ---------------------------------------------------------------------------------------------
# The recommendation: the largest share among the sigmas whose members keep their reward
# ---------------------------------------------------------------------------------------------

# Members must keep at least this share of the center's mean reward for their sigma to be
# recommended. Below it a perturbation mostly breaks the model: the update would follow the
# directions that break it least, and z-scored steps are full size whatever they follow. Half is
# a judgement, not a measurement: the demo's shipped sigma 0.01 keeps 65 %, its sigma 0.03 keeps 3 %.
KEEP_AT_LEAST = 0.5


def collapses(row: dict[str, Any]) -> bool:
    return row["members_keep"] is not None and row["members_keep"] < KEEP_AT_LEAST


def recommend(rows: list[dict[str, Any]], samples: int, configured: float) -> tuple[float | None, str]:
    """Give every row a `verdict` and a `reason`; (the recommended sigma or None, the advice sentence)."""
    for row in rows:
        if collapses(row):
            row["verdict"], row["reason"] = "refused", (
                f"members keep {row['members_keep']:.0%} of the center's reward (below {KEEP_AT_LEAST:.0%}): "
                "this sigma breaks the model")
        elif row["signal_share"] is None:
            row["verdict"], row["reason"] = "no signal", "no reward differed between the units"
        elif row["signal_share"] <= 0:
            row["verdict"], row["reason"] = "no signal", f"share {row['signal_share']:.2f}: nothing above noise"
    kept = [r for r in rows if "verdict" not in r]
    refused = [r for r in rows if r.get("verdict") == "refused"]
    if not kept:
        smallest = min(r["sigma"] for r in rows)
        if len(refused) == len(rows):
            return None, (f"every sigma probed breaks the model (members keep less than {KEEP_AT_LEAST:.0%} of the "
                          f"center's reward): probe smaller ones, e.g. --set es.sigma={smallest / 3:.3g}")
        return None, (f"no sigma whose members keep {KEEP_AT_LEAST:.0%} of the center's reward showed signal at "
                      f"{samples} samples per member: raise es.problems_per_iteration or es.samples_per_problem "
                      "(or lower es.member_temperature) and probe again" + _refused_note(refused))
    best = max(kept, key=lambda r: r["signal_share"])
    for row in kept:
        row["verdict"], row["reason"] = ("recommended", f"the largest share of those keeping {KEEP_AT_LEAST:.0%}") \
            if row is best else ("weaker", f"share {row['signal_share']:.2f} below {best['signal_share']:.2f}")
    if best["signal_share"] >= NOISE_BELOW:
        budget = " (mostly signal)"
    else:
        best["reason"] += ", still mostly noise"
        budget = (f"; still mostly noise: about {best['samples_per_member_for_half']} samples per member would "
                  f"reach {NOISE_BELOW} (Spearman-Brown)")
    which = " (the configured one)" if best["sigma"] == configured else ""
    text = (f"es.sigma = {best['sigma']:.3g}{which}: share {best['signal_share']:.2f} at {samples} samples per member, "
            f"members {best['member_reward']:.3f} against the center's {best['center_reward']:.3f}{budget}")
    return best["sigma"], text + _refused_note(refused)


def _refused_note(refused: list[dict[str, Any]]) -> str:
    return "".join(f"; not {r['sigma']:.3g} (share {_share(r['signal_share'])}): its members score "
                   f"{r['member_reward']:.3f} against the center's {r['center_reward']:.3f}" for r in refused)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def probe_table(rows: list[dict[str, Any]], samples: int) -> dict[str, Any]:
    def estimate(row: dict[str, Any]) -> str:
        error = row["signal_share_per_iteration_error"]
        return _share(row["signal_share_per_iteration"]) + ("" if error is None else f"±{error:.2f}")

    return {
        "title": f"ES probe: members' reward, signal share and the recommendation at {samples} samples per member",
        "columns": ["sigma", "members' reward", "center reward", "signal share (pairs)", "signal share (members)",
                    "per-iteration estimate", "members above center", f"samples/member for {NOISE_BELOW}",
                    "recommendation"],
        "rows": [[f"{r['sigma']:.3g}", f"{r['member_reward']:.3f}", f"{r['center_reward']:.3f}",
                  _share(r["signal_share_pairs"]), _share(r["signal_share_members"]), estimate(r),
                  f"{r['members_above_center']}/{r['members']}",
                  "-" if r["samples_per_member_for_half"] is None else r["samples_per_member_for_half"],
                  f"{r['verdict']}: {r['reason']}"]
                 for r in rows],
    }


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)
