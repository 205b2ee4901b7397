"""Collective performance from measurements: an alpha-beta model of all-reduce bus bandwidth.

Fernandez et al. (2024) measured NCCL all-reduce on 4 to 512 nodes of eight H100s with
nccl-tests; the project's data file ``paper2_nccl_allreduce_busbw.csv`` holds their figure,
digitized.  nccl-tests reports *bus bandwidth*, the algorithm bandwidth ``M / t`` scaled by the
fraction ``f = 2 (p - 1) / p`` of the message each of ``p`` ranks sends in a ring all-reduce, so
that it is comparable with a link's bandwidth whatever the rank count.

The model derived here: the all-reduce of ``M`` bytes takes a latency that grows with the
logarithm of the node count (NCCL's tree and ring latencies grow with the number of hops between
nodes) plus the bandwidth time of the bytes each rank sends,

    t = alpha_n log2(n) + f M / B_bus,

so the bus bandwidth approaches ``B_bus`` for large messages and falls to half of it at
``M_1/2 = alpha_n B_bus log2(n) / f``, a size that grows with the node count, as the paper
observes.  ``alpha_n`` and ``B_bus`` are fitted by least squares on the relative error of the
time (each point weighted by its inverse measured time); :func:`fit` returns them with the
fit's errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import sympy as sp

from dmlimits.core import published
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.derivation import Derivation, Step, Substitution, derivation, register

CHAPTER = "diminishing_returns"
DATA = "paper2_nccl_allreduce_busbw.csv"
GB = 1e9

_decl = s.REGISTRY.declare
alpha_node = _decl(
    "alpha_AR",
    r"\alpha_{\mathrm{AR}}",
    "all-reduce latency per doubling of the node count (fitted)",
    u.second,
    defined_in=CHAPTER,
)
bw_bus = _decl(
    "B_bus",
    r"B_{\mathrm{bus}}",
    "all-reduce bus bandwidth of large messages (fitted)",
    u.byte / u.second,
    defined_in=CHAPTER,
)
busbw = _decl(
    "b_bus",
    r"b_{\mathrm{bus}}",
    "measured bus bandwidth of one all-reduce",
    u.byte / u.second,
    defined_in=CHAPTER,
)
msg = _decl("M_msg", "M", "bytes all-reduced", u.byte, defined_in=CHAPTER)
t_ar = _decl(
    "t_ARm", r"t_{\mathrm{meas}}", "time of one measured all-reduce", u.second, defined_in=CHAPTER
)
ranks = _decl(
    "p_ranks", r"n_{\mathrm{ranks}}", "ranks taking part in the all-reduce", defined_in=CHAPTER
)
nodes = _decl("n_nodes", "n", "nodes taking part in the all-reduce", defined_in=CHAPTER)
m_half = _decl(
    "M_half",
    r"M_{1/2}",
    "message size at which the bus bandwidth is half its peak",
    u.byte,
    defined_in=CHAPTER,
)

RING_FRACTION = 2 * (ranks - 1) / ranks
ALPHA_BETA = Substitution(
    "latency growing with log2 of the nodes, bandwidth time of the bytes sent",
    {t_ar: alpha_node * sp.log(nodes) / sp.log(2) + RING_FRACTION * msg / bw_bus},
    kind="assumption",
)


@register
def busbw_derivation() -> Derivation:
    e1 = sp.Eq(busbw, RING_FRACTION * msg / t_ar)
    e2 = ALPHA_BETA.apply(e1)
    lg = sp.log(nodes) / sp.log(2)
    e3 = sp.Eq(busbw, bw_bus / (1 + alpha_node * bw_bus * lg / (RING_FRACTION * msg)))
    half = sp.Eq(bw_bus / 2, e3.rhs.subs(msg, m_half))
    solved = sp.Eq(m_half, alpha_node * bw_bus * lg / RING_FRACTION)
    return derivation(
        "allreduce-busbw",
        "Bus bandwidth of an all-reduce whose latency grows with the node count",
        [
            Step(
                "nccl-tests' bus bandwidth: the bytes each rank sends in a ring all-reduce over "
                "the time taken",
                e1,
            ),
            Step("The time of one all-reduce", e2, using=ALPHA_BETA),
            Step("Divided through: the bus bandwidth tends to its peak for large messages", e3),
            Step(
                "Half the peak is reached at the message size",
                half,
                using=Substitution("half the peak", {msg: m_half, busbw: bw_bus / 2}),
            ),
            Step("Solved for that size, which grows with the node count", solved, solve_for=m_half),
        ],
        chapter=CHAPTER,
    )


COST_FORMULAS = {
    "allreduce_time": (ALPHA_BETA.mapping[t_ar], u.second),
    "busbw": (busbw_derivation().steps[2].expr.rhs, u.byte / u.second),
    "half_peak_message": (busbw_derivation().result.rhs, u.byte),
}


@cache
def _fns() -> dict:
    """The numeric forms of the derivation's expressions: bus bandwidth, half-peak size, and the
    two terms of the all-reduce time (latency per unit of alpha, bytes each rank sends)."""
    time = ALPHA_BETA.mapping[t_ar]
    return {
        "busbw": sp.lambdify(
            (msg, nodes, ranks, alpha_node, bw_bus), COST_FORMULAS["busbw"][0], "numpy"
        ),
        "half": sp.lambdify(
            (nodes, ranks, alpha_node, bw_bus), COST_FORMULAS["half_peak_message"][0], "numpy"
        ),
        "hops": sp.lambdify((nodes,), sp.diff(time, alpha_node), "numpy"),
        "sent": sp.lambdify((msg, ranks), sp.expand(time.subs(alpha_node, 0) * bw_bus), "numpy"),
    }


@dataclass(frozen=True)
class Measurements:
    nodes: np.ndarray
    gpus_per_node: np.ndarray
    message_bytes: np.ndarray
    busbw: np.ndarray  # byte/s

    @property
    def ranks(self) -> np.ndarray:
        return self.nodes * self.gpus_per_node


@cache
def measurements() -> Measurements:
    rows = published.data_rows(DATA)
    col = lambda k: np.array([float(r[k]) for r in rows])  # noqa: E731
    return Measurements(
        col("nodes"), col("gpus_per_node"), col("message_bytes"), col("busbw_GBps") * GB
    )


@dataclass(frozen=True)
class Fit:
    alpha: float  # s per doubling of the node count
    bus_bandwidth: float  # byte/s
    relative_errors: np.ndarray  # (model - measured) / measured bus bandwidth, per point

    @property
    def median_abs_error(self) -> float:
        return float(np.median(np.abs(self.relative_errors)))

    @property
    def max_abs_error(self) -> float:
        return float(np.max(np.abs(self.relative_errors)))

    def busbw(self, message_bytes, n_nodes, gpus_per_node=8):
        """Modelled bus bandwidth (byte/s)."""
        n = np.asarray(n_nodes, dtype=float)
        return _fns()["busbw"](
            np.asarray(message_bytes, dtype=float),
            n,
            n * gpus_per_node,
            self.alpha,
            self.bus_bandwidth,
        )

    def latency(self, n_nodes) -> float:
        """Latency of one all-reduce over ``n_nodes`` nodes (s)."""
        return float(self.alpha * _fns()["hops"](float(n_nodes)))

    def half_peak_message(self, n_nodes, gpus_per_node=8) -> float:
        """Message size (bytes) at which the bus bandwidth is half its peak."""
        return float(
            _fns()["half"](
                float(n_nodes), float(n_nodes * gpus_per_node), self.alpha, self.bus_bandwidth
            )
        )


@cache
def fit() -> Fit:
    """Least squares on the relative error of the time: minimise
    sum(((alpha log2 n + f M / B) - t) / t)^2 over alpha and 1/B (linear in both)."""
    m = measurements()
    sent = _fns()["sent"](m.message_bytes, m.ranks)  # f M: bytes each rank sends
    t = sent / m.busbw  # measured time, from the definition of bus bandwidth
    design = np.column_stack([_fns()["hops"](m.nodes), sent]) / t[:, None]
    (alpha, inv_b), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if alpha <= 0 or inv_b <= 0:
        raise ValueError(f"all-reduce fit gave non-physical values alpha={alpha}, 1/B={inv_b}")
    result = Fit(float(alpha), float(1 / inv_b), np.zeros(0))
    model = result.busbw(m.message_bytes, m.nodes, m.gpus_per_node)
    return Fit(result.alpha, result.bus_bandwidth, (model - m.busbw) / m.busbw)


def figure(fitted: Fit | None = None):
    """Measured points and the fitted curves, one colour per node count."""
    import matplotlib.pyplot as plt  # matplotlib loads only where a figure is drawn

    fitted = fitted or fit()
    m = measurements()
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    grid = np.logspace(np.log10(m.message_bytes.min()), np.log10(m.message_bytes.max()), 200)
    counts = np.unique(m.nodes)
    # One colour per node count, in order (a sequential map), and one marker each: neighbouring
    # counts are close in colour, and the marker tells them apart.
    colours = plt.cm.viridis(np.linspace(0.0, 0.9, len(counts)))
    markers = "os^Dv<>ph"
    for k, (n, colour) in enumerate(zip(counts, colours, strict=True)):
        sel = m.nodes == n
        ax.plot(
            m.message_bytes[sel],
            m.busbw[sel] / GB,
            markers[k % len(markers)],
            color=colour,
            ms=4,
            label=f"{int(n)} nodes (measured)",
        )
        ax.plot(grid, fitted.busbw(grid, n) / GB, "-", color=colour, lw=1.2)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("all-reduce bus bandwidth (GB/s)")
    ax.set_title("All-reduce on H100 nodes: measured (points) and fitted (lines)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig
