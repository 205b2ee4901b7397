"""One coherent model (issue #12): every choice the search makes by default is the rule its
chapter derives and calls the default, and the search's numeric code follows that rule.

Each chapter module names the rules it derives (``CHAPTER_RULES``); the scenario schema's
defaults must be those, the chapter must name the option, and the search must do what the
chapter's rule says, checked here against independent counts rather than the search's own
helpers.  A default changed in one place and not the other fails here."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from dmlimits import search
from dmlimits.core import scenario as sc
from dmlimits.costs import expert_parallel as epm
from dmlimits.costs import pipeline as ppm
from dmlimits.costs import step
from dmlimits.costs import tensor_parallel as tpm
from dmlimits.search import candidates, engine

ROOT = Path(__file__).resolve().parent.parent
CHAPTER_MODULES = (ppm, tpm, epm, step)


def _rules() -> dict[str, tuple[str, object]]:
    out: dict[str, tuple[str, object]] = {}
    for module in CHAPTER_MODULES:
        for key, value in module.CHAPTER_RULES.items():
            assert key not in out, f"{key} is claimed by two chapters"
            out[key] = (module.CHAPTER, value)
    return out


RULES = _rules()


def test_every_search_choice_is_derived_by_a_chapter():
    search_keys = {k for k in sc.SCHEMA if k.startswith("search.")}
    assert set(RULES) == search_keys


@pytest.mark.parametrize("key", sorted(RULES))
def test_the_default_is_the_chapters_rule(key):
    chapter, value = RULES[key]
    assert sc.SCHEMA[key].default == value, (
        f"{key}: the scenario's default is {sc.SCHEMA[key].default!r} but chapter "
        f"{chapter!r} derives {value!r}"
    )


@pytest.mark.parametrize("key", sorted(RULES))
def test_the_chapter_names_the_option(key):
    chapter, _ = RULES[key]
    text = (ROOT / "notebooks" / f"{chapter}.md").read_text()
    assert f"`{key}`" in text, f"notebooks/{chapter}.md does not name `{key}`"


# --- The search follows each rule ------------------------------------------------------------
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _small_points() -> list[tuple[sc.Scenario, search.Point, int]]:
    """Small models on small clusters, dense and sparse, where brute force is cheap."""
    out = []
    for preset, experts in (("h100", 1), ("h100-sparse", 4)):
        scn = sc.resolve(preset)
        for d_model, layers, batch, n_gpu in (
            (512, 12, 24 * 64, 32), (768, 8, 40 * 16, 64), (256, 6, 9 * 128, 16),
        ):  # fmt: skip
            pt = search.Point(
                d_model=d_model, d_ff=4 * d_model, layers=layers, experts=experts,
                batch=batch * experts, params=8.0 * d_model**2 * layers * experts,
                active=8.0 * d_model**2 * layers, compute=1.0,
            )  # fmt: skip
            out.append((scn, pt, n_gpu * experts))
    return out


@pytest.mark.parametrize(("scn", "pt", "n_gpu"), _small_points())
def test_the_search_tries_the_pipeline_chapters_microbatches(scn, pt, n_gpu):
    """1F1B: the four smallest divisors of the tokens per pipeline of at least N_PP; zero bubble:
    the smallest of at least 2 N_PP (tokens, because the model has no attention)."""
    c = candidates.base(scn, pt, n_gpu, search.Choices.of(scn))
    assert c is not None
    for pp, dp, m, zb in {
        (int(a), int(b), int(x), int(z))
        for a, b, x, z in zip(c["pp"], c["dp"], c["m"], c["zero_bubble"], strict=True)
    }:
        tokens = pt.batch // (pt.experts * dp)
        least = 2 * pp if zb else pp
        allowed = [d for d in _divisors(tokens) if d >= least]
        assert m in allowed[: 1 if zb else 4], (pp, dp, m, zb)
        if zb:
            assert m == allowed[0] and pp > 1


@pytest.mark.parametrize(("scn", "pt", "n_gpu"), _small_points())
def test_the_search_splits_tensor_parallelism_by_the_chapters_rule(scn, pt, n_gpu):
    c = candidates.base(scn, pt, n_gpu, search.Choices.of(scn))
    pairs = {(int(m), int(f)) for m, f in zip(c["tp_model"], c["tp_ff"], strict=True)}
    for tp in {m * f for m, f in pairs}:
        root = math.isqrt(tp)
        want = {
            (tp // f, f) for f in _divisors(tp)
            if root <= f <= 4 * root and pt.d_model % (tp // f) == 0 and pt.d_ff % f == 0
        }  # fmt: skip
        got = {p for p in pairs if p[0] * p[1] == tp}
        assert got == want, (tp, got, want)


def test_the_search_pays_expert_latency_at_the_highest_level():
    """An expert group of 8 inside one node, no pipeline: every one of the L - 1 interfaces
    waits one latency each way, whatever share of the tokens stays on its GPU."""
    scn = sc.resolve("h100-sparse")
    pt = search.points(scn)[0]
    ch = search.Choices.of(scn)
    c = {"pp": np.array([1]), "ep": np.array([8]), "v": np.array([1])}
    c.update(d_model=np.array([pt.d_model]), batch=np.array([pt.batch]))
    c.update(layers=np.array([pt.layers]), n_gpu=np.array([64.0 * 8]))
    factors = np.array([1, 2, 4, 8])
    ok, t = engine.pp_ep_distinct(scn, c, factors, ch)
    j = list(factors).index(8)
    assert ok[0, 0, j]
    want = (pt.layers - 1) * 2 * scn["network.latency"]
    assert t.latency[0, 0, j] == pytest.approx(want)


def test_the_network_time_is_the_search_chapters_derivation():
    """The search's hidden bandwidth time is the search-network-time derivation evaluated by
    sympy (not lambdified): the busier of the two kinds of links."""
    d = step.network_time_derivation().verify()
    rng = np.random.default_rng(1)
    tp_m, tp_f, pe = rng.uniform(0, 1, (3, 2, 5))
    got = engine.network_time(
        {"tp_model": (tp_m[0], tp_m[1]), "tp_ff": (tp_f[0], tp_f[1]), "pp_ep": (pe[0], pe[1])},
        sc.SCHEMA["search.level_times"].default,
    )
    for k in range(5):
        values = {
            step.t_family["TP", 0]: tp_m[0][k] + tp_f[0][k],
            step.t_family["TP", 1]: tp_m[1][k] + tp_f[1][k],
            step.t_family["PE", 0]: pe[0][k], step.t_family["PE", 1]: pe[1][k],
        }  # fmt: skip
        assert got[k] == pytest.approx(float(d.result.rhs.subs(values)))
    # The gradient all-reduce alone: the larger of its two levels, the data-parallel chapter's
    # default.
    alone = engine.network_time({"dp": (tp_m[0], tp_m[1])}, "links")
    assert np.allclose(alone, np.maximum(tp_m[0], tp_m[1]))


def test_the_search_rules_differ_from_their_alternatives():
    """Every alternative is a different rule: a test that could not tell them apart proves
    nothing."""
    assert tpm.tp_splits(8, "isqrt") != tpm.tp_splits(8, "exact")
    assert ppm.least_microbatches(4, True, "2n") != ppm.least_microbatches(4, True, "2n-1")
    assert ppm.unit_tokens("token", 2048) != ppm.unit_tokens("sequence", 2048)
    parts = {"tp_model": (1.0, 2.0), "pp_ep": (2.0, 1.0)}
    values = {rule: float(engine.network_time(parts, rule)) for rule in sc.SCHEMA[
        "search.level_times"].choices}  # fmt: skip
    assert len(set(values.values())) == len(values), values
    # The symbolic rule is a maximum, not a sum.
    assert isinstance(step.NETWORK_TIME, sp.Max)
