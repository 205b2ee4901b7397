"""One matmul on one GPU: the single-device cost model of the book.

Erdil & Schneider-Joseph (2024, "Data movement limits to frontier model training",
arXiv:2411.01137) time every matmul of a training step with a roofline over the GPU's memory
hierarchy.  This module rebuilds that model (in the authors' final code, ``gpu/gpu_model.py`` in
the public repository ``ege-erdil/limits_to_distributed_training``, commit b1f771c, October
2024) in our own terms:

* **The operation.**  A weight operand of ``d1 x d2`` meets a *nanobatch* of ``b`` tokens.  Three
  kinds occur in training: the forward pass ``Y = W X`` and the activation gradient
  ``dX = W^T dY`` (a ``d1 x d2`` operand times a ``d2 x b`` input, accumulating a ``d1 x b``
  output; for the activation gradient ``d1 x d2`` is the shape of ``W^T``), and the weight
  gradient ``dW = dY X^T`` (a ``d1 x b`` and a ``d2 x b`` operand, accumulating ``d1 x d2``).
* **The hierarchy.**  HBM, the L2 cache, and the streaming multiprocessors (SMs), each with a
  register file split over processing blocks; shared memory is the staging buffer between L2 and
  registers.  Three boundaries are crossed: HBM-L2, L2-SM and shared memory-registers.
* **Tiling.**  ``b`` is the smallest dimension (data and pipeline parallelism both slice it), so
  every boundary tiles the *weight* shape: the fewest tiles that fit the lower level's usable
  capacity (75 % of it), each as near square as the shard allows.
* **Traffic across a boundary.**  Weights and their gradients stay at the lowest level that holds
  both; above it nothing moves for them.  Otherwise every pass streams the weights down once, and
  the weight-gradient pass loads and stores the running gradient.  The input activations are
  fetched once per row of tiles; the forward/activation-gradient output is accumulated once per
  column of tiles (a store, and a load of the partial sum for every column after the first); the
  weight gradient's ``d1 x b`` operand is fetched once per column.
* **Multicast.**  With distributed shared memory (Hopper), the L2-SM boundary is crossed as if all
  SMs' registers were one store; spreading the data among SMs then costs shared-memory traffic
  (counted at both ends) instead of L2 traffic.
* **Time.**  The largest of HBM, L2, shared-memory and arithmetic time, plus a fixed kernel
  latency.  Shared memory moves ``32 banks x 4 bytes`` per SM per clock at the derated clock;
  arithmetic runs at the derated rate ``eta F`` on dimensions padded to multiples of 8.

Every cost is a sympy expression in registered symbols (:func:`cost_expressions`); the numeric
functions are lambdified from those same expressions and broadcast over numpy arrays of
``d1, d2, b``.  Every hardware number comes from a :class:`~dmlimits.core.scenario.Scenario`.
"""

from __future__ import annotations

import csv
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy as sp

from dmlimits.core import formula_cache, published
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.checks import as_output, numbers, require_scenario
from dmlimits.core.derivation import Derivation, Step, Substitution, derivation, register
from dmlimits.core.scenario import Scenario

if TYPE_CHECKING:
    pass

CHAPTER = "matmul"

# --- Definitional constants ------------------------------------------------------------------
# One multiply-accumulate is a multiply and an add: two FLOP (the usual convention, also the
# model chapter's).
FLOP_PER_MAC = 2
# Tensor cores work on fixed fragments; the authors' final code (gpu/gpu_model.py) pads every
# dimension of the arithmetic to a multiple of 8.
PAD_MULTIPLE = 8
# Shared memory: 32 banks per SM, each 4 bytes wide per clock (NVIDIA CUDA C++ Programming
# Guide, "Shared Memory"; the authors' final code, gpu/gpu_model.py).
SHARED_BANKS = 32
BANK_BYTES = 4
# Usable share of L2 and of the register file for tiles (the authors' final code,
# gpu/gpu_model.py; the rest holds addresses, indices and buffers).
USABLE_FRACTION = sp.Rational(3, 4)

KINDS = ("forward", "activation-grad", "weight-grad")
#: The memories whose bandwidth can bind a matmul.
LEVELS = ("hbm", "l2", "shared")  # the memories whose bandwidth can bind

_decl = s.REGISTRY.declare
_S = u.second
_B = u.byte

# --- Symbols -----------------------------------------------------------------------------------
# The operation.
d1 = _decl(
    "d_1",
    "d_1",
    "rows of a matmul's weight operand (its output dimension in the forward "
    "and activation-gradient passes)",
    defined_in=CHAPTER,
)
d2 = _decl("d_2", "d_2", "columns of a matmul's weight operand", defined_in=CHAPTER)
b = _decl("b", "b", "nanobatch: tokens in one matmul on one GPU", defined_in=CHAPTER)
word = _decl("w_word", "w", "bytes per word (16-bit arithmetic)", _B, defined_in=CHAPTER)
# The GPU.
bw_hbm = _decl(
    "W_HBM", r"W_{\mathrm{HBM}}", "HBM bandwidth of one GPU", _B / _S, defined_in=CHAPTER
)
bw_l2 = _decl(
    "W_L2", r"W_{\mathrm{L2}}", "L2 cache bandwidth of one GPU", _B / _S, defined_in=CHAPTER
)
bw_shared = _decl(
    "W_sh",
    r"W_{\mathrm{sh}}",
    "shared-memory bandwidth of one GPU (all SMs)",
    _B / _S,
    defined_in=CHAPTER,
)
cap_l2 = _decl("M_L2", r"M_{\mathrm{L2}}", "L2 cache capacity", _B, defined_in=CHAPTER)
cap_reg = _decl(
    "M_reg", r"M_{\mathrm{reg}}", "register file of one processing block", _B, defined_in=CHAPTER
)
n_blocks = _decl("n_blk", r"n_{\mathrm{blk}}", "processing blocks per SM", defined_in=CHAPTER)
# The book's extension for Blackwell (not in the paper): where the tensor cores accumulate.
cap_tmem = _decl(
    "M_tmem",
    r"M_{\mathrm{tmem}}",
    "tensor memory of one SM (Blackwell's accumulators; 0 before Blackwell)",
    _B,
    defined_in=CHAPTER,
    may_be_zero=True,
)
n_mma = _decl(
    "n_mma",
    r"n_{\mathrm{mma}}",
    "SMs one tensor-core instruction's tile spans",
    defined_in=CHAPTER,
    integer=True,
)
n_sms = _decl(
    "n_SM", r"n_{\mathrm{SM}}", "streaming multiprocessors (SMs) per GPU", defined_in=CHAPTER
)
clock = _decl("f_clk", r"f_{\mathrm{clk}}", "maximum clock frequency", 1 / _S, defined_in=CHAPTER)
t_kernel = _decl(
    "t_kern", r"t_{\mathrm{kern}}", "fixed latency of one matmul kernel", _S, defined_in=CHAPTER
)
# Definitional constants, kept symbolic in the formulas the book shows.
usable = _decl(
    "phi_use", r"\phi", "usable fraction of L2 and of the register file", defined_in=CHAPTER
)
n_banks = _decl("n_bank", r"n_{\mathrm{bank}}", "shared-memory banks per SM", defined_in=CHAPTER)
bank_width = _decl(
    "w_bank", r"w_{\mathrm{bank}}", "bytes one bank moves per clock", _B, defined_in=CHAPTER
)
pad = _decl(
    "g_pad", "g", "multiple to which the arithmetic pads each dimension", defined_in=CHAPTER
)
# Tiling of the weight shape at one boundary.
tile_rows = _decl(
    "r_tile", r"r_{\mathrm{t}}", "rows of tiles (tiles along d_1)", defined_in=CHAPTER
)
tile_cols = _decl(
    "c_tile", r"c_{\mathrm{t}}", "columns of tiles (tiles along d_2)", defined_in=CHAPTER
)
# Traffic, times and the result.
q_hbm = _decl(
    "Q_HBM",
    r"Q_{\mathrm{HBM}}",
    "bytes moved to and from HBM by one matmul",
    _B,
    defined_in=CHAPTER,
)
q_l2 = _decl(
    "Q_L2", r"Q_{\mathrm{L2}}", "bytes moved to and from L2 by one matmul", _B, defined_in=CHAPTER
)
q_shared = _decl(
    "Q_sh",
    r"Q_{\mathrm{sh}}",
    "bytes moved through shared memory by one matmul",
    _B,
    defined_in=CHAPTER,
)
q_mc = _decl(
    "Q_mc",
    r"Q_{\mathrm{mc}}",
    "bytes one matmul moves between SMs over distributed shared memory",
    _B,
    defined_in=CHAPTER,
)
n_tx = _decl("n_tx", r"n_{\mathrm{tx}}", "sends of one input value between SMs", defined_in=CHAPTER)
n_rx = _decl(
    "n_rx", r"n_{\mathrm{rx}}", "receives of one input value between SMs", defined_in=CHAPTER
)
t_hbm = _decl("t_HBM", r"t_{\mathrm{HBM}}", "HBM time of one matmul", _S, defined_in=CHAPTER)
t_l2 = _decl("t_L2", r"t_{\mathrm{L2}}", "L2 time of one matmul", _S, defined_in=CHAPTER)
t_shared = _decl(
    "t_sh", r"t_{\mathrm{sh}}", "shared-memory time of one matmul", _S, defined_in=CHAPTER
)
t_arith = _decl(
    "t_arith", r"t_{\mathrm{arith}}", "arithmetic time of one matmul", _S, defined_in=CHAPTER
)
t_matmul = _decl(
    "t_mm", r"t_{\mathrm{mm}}", "time of one matmul on one GPU", _S, defined_in=CHAPTER
)
intensity = _decl(
    "I_mm", r"I", "arithmetic intensity: FLOP per byte moved", u.flop / _B, defined_in=CHAPTER
)
efficiency = _decl(
    "u_mm", r"u_{\mathrm{mm}}", "matmul efficiency: useful FLOP/s over peak", defined_in=CHAPTER
)

# The definitional constants as one named substitution (applied before lambdifying).
CONSTANTS = Substitution(
    "definitional constants",
    {
        s.flop_per_mac: FLOP_PER_MAC,
        pad: PAD_MULTIPLE,
        n_banks: SHARED_BANKS,
        bank_width: BANK_BYTES,
        usable: USABLE_FRACTION,
    },
)

# Where each hardware symbol's value comes from in a scenario.
_SCENARIO_KEYS: dict[sp.Symbol, str] = {
    word: "model.word_bytes",
    bw_hbm: "hardware.hbm_bandwidth",
    bw_l2: "hardware.l2_bandwidth",
    cap_l2: "hardware.l2_size",
    cap_reg: "hardware.register_file_per_block",
    n_blocks: "hardware.blocks_per_sm",
    cap_tmem: "hardware.tensor_memory_per_sm",
    n_mma: "hardware.mma_sms",
    n_sms: "hardware.sms",
    clock: "hardware.max_clock",
    s.eff_util: "hardware.effective_utilization",
    t_kernel: "hardware.kernel_latency",
}
HARDWARE = (*_SCENARIO_KEYS, s.peak_flops)  # lambdify arguments after d1, d2, b


# --- Building blocks, symbolic ---------------------------------------------------------------
def tile_grid(capacity: sp.Expr) -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """Tiles ``(k, rows, cols)`` of the ``d1 x d2`` weight shape, at most ``capacity`` bytes each.

    ``k`` is the fewest tiles that fit; each then holds ``d1 d2 / k`` words.  A square tile of that
    area would give ``sqrt(k d1 / d2)`` rows; a tile cannot be taller than the shard (at least one
    row) nor wider (at most ``k`` rows), so the count is clipped to ``[1, k]``.  Tile counts are
    kept fractional apart from ``k``, as in Erdil & Schneider-Joseph (2024): the model ignores the
    remaining discrete constraints rather than searching them.
    """
    k = sp.ceiling(word * d1 * d2 / capacity)
    rows = sp.Min(sp.Max(1, sp.sqrt(k * d1 / d2)), k)
    return k, rows, k / rows


def resident_bytes() -> sp.Expr:
    """Bytes the weights and their gradients occupy where they live: two words per weight."""
    return 2 * word * d1 * d2


def streamed(capacity: sp.Expr) -> sp.Expr:
    """1 when the weights and their gradients (two words per weight) exceed ``capacity``, else 0."""
    return sp.Piecewise((1, resident_bytes() > capacity), (0, True))


def boundary_traffic(kind: str, rows: sp.Expr, cols: sp.Expr, streaming: sp.Expr) -> sp.Expr:
    """Bytes crossing one boundary of the hierarchy, tiled in ``rows x cols`` weight tiles.

    ``streaming`` is 1 when the weights live above the boundary (see :func:`streamed`).
    """
    kind = check_kind(kind)
    inputs = rows * word * d2 * b  # the d2 x b operand, once per row of tiles
    if kind == "weight-grad":
        # The d1 x b operand once per column of tiles.
        return streaming * weight_traffic(kind) + inputs + cols * word * d1 * b
    # Accumulate the output once per column: a store each time, and a load of the partial sum
    # every time but the first.
    return streaming * weight_traffic(kind) + inputs + (2 * cols - 1) * word * d1 * b


def weight_traffic(kind: str) -> sp.Expr:
    """Bytes of weights (or weight gradients) one pass moves across a boundary above them."""
    weights = word * d1 * d2
    # The weight-gradient pass loads the running gradient and stores it back; the others load
    # the weights once.
    return 2 * weights if check_kind(kind) == "weight-grad" else weights


def multicast_traffic(kind: str, rows: sp.Expr, cols: sp.Expr) -> sp.Expr:
    """Bytes moved between SMs over distributed shared memory, counted at both ends.

    With ``rows x cols`` per-SM tiles, every SM of a column of tiles needs the same input
    values.  A multicast sends each value once and every other SM of the column receives it:
    ``rows`` transfers, one send and ``rows - 1`` receives (none when there is one row).  The
    weight gradient's ``d1 x b`` operand is shared along a row of tiles the same way: ``cols``
    transfers.  The forward and activation-gradient outputs are instead reduced: each of the
    ``cols - 1`` SMs that do not own a partial output sends it to the one that does, which
    receives it, two transfers each.
    """
    kind = check_kind(kind)
    inputs = sp.Piecewise((rows, rows > 1), (0, True)) * word * d2 * b
    if kind == "weight-grad":
        return inputs + sp.Piecewise((cols, cols > 1), (0, True)) * word * d1 * b
    return inputs + 2 * (cols - 1) * word * d1 * b


def padded(x: sp.Expr) -> sp.Expr:
    """``x`` rounded up to a multiple of the tensor-core padding ``g``."""
    return pad * sp.ceiling(x / pad)


def shared_bandwidth() -> sp.Expr:
    """Banks x bank width x SMs x the derated clock."""
    return n_banks * bank_width * n_sms * clock * s.eff_util


#: The boundaries between memories that a matmul's data crosses.
BOUNDARIES = ("hbm-l2", "l2-sm", "sm-sm", "shared-registers")


def boundary_capacities(multicast: bool) -> dict[str, sp.Expr]:
    """Usable bytes of the level below each boundary, symbolic.

    Tile sizes: ``hbm-l2`` (the usable L2), ``l2-sm`` (the usable registers of one SM, or of all
    SMs together with multicast), ``sm-sm`` (one SM's registers, the tiles that distributed
    shared memory spreads; with multicast only) and ``shared-registers`` (where the tensor cores
    accumulate a tile: one processing block's usable registers in the paper's model, or, when
    larger, the usable tensor memory of the SMs one tensor-core instruction spans, the book's
    extension for Blackwell).  Residence: ``l2-resident`` (weights and gradients that fit here
    stay in L2) and ``registers-resident`` (the usable registers of all SMs together).
    """
    block_room = usable * cap_reg
    sm_room = n_blocks * block_room
    all_sms = n_sms * sm_room
    rooms = {
        "hbm-l2": usable * cap_l2,
        "l2-sm": all_sms if multicast else sm_room,
        "shared-registers": usable * sp.Max(cap_reg, n_mma * cap_tmem),
        "l2-resident": usable * cap_l2,
        "registers-resident": all_sms,
    }
    if multicast:
        rooms["sm-sm"] = sm_room
    return rooms


@cache
@formula_cache.expressions
def traffic_expressions(kind: str, multicast: bool) -> dict[str, sp.Expr]:
    """Bytes through HBM, L2 and shared memory (keys of :data:`LEVELS`), symbolic."""
    kind = check_kind(kind)
    room = boundary_capacities(multicast)
    # HBM-L2: one L2, tiles of its usable capacity.
    _, rows, cols = tile_grid(room["hbm-l2"])
    hbm_l2 = boundary_traffic(kind, rows, cols, streamed(room["l2-resident"]))
    # L2-SM: each SM holds a tile in its blocks' registers; with multicast all SMs act as one.
    _, rows, cols = tile_grid(room["l2-sm"])
    l2_sm = boundary_traffic(kind, rows, cols, streamed(room["registers-resident"]))
    if multicast:
        _, rows, cols = tile_grid(room["sm-sm"])
        between_sms = multicast_traffic(kind, rows, cols)
    else:
        between_sms = sp.Integer(0)
    # Shared memory-registers: each processing block holds a tile.
    _, rows, cols = tile_grid(room["shared-registers"])
    sm_reg = boundary_traffic(kind, rows, cols, streamed(room["registers-resident"]))
    return {"hbm": hbm_l2, "l2": hbm_l2 + l2_sm, "shared": l2_sm + between_sms + sm_reg}


@cache
@formula_cache.expressions
def cost_expressions(kind: str, multicast: bool) -> dict[str, sp.Expr]:
    """Each time of one matmul, in seconds, as sympy expressions in registered symbols.

    Keys: ``hbm``, ``l2``, ``shared``, ``arithmetic``, ``latency`` and ``total``
    (= the largest of the first four plus the latency); ``efficiency`` is dimensionless.
    """
    q = traffic_expressions(kind, multicast)
    times = {
        "hbm": q["hbm"] / bw_hbm,
        "l2": q["l2"] / bw_l2,
        "shared": q["shared"] / shared_bandwidth(),
        "arithmetic": s.flop_per_mac
        * padded(d1)
        * padded(d2)
        * padded(b)
        / (s.eff_util * s.peak_flops),
        "latency": t_kernel,
    }
    # Unevaluated: sympy's evaluation looks for arguments it can drop by comparing each pair of
    # these long expressions, for every kind; none can be dropped, so the expression is the
    # same (a test builds it evaluated and compares).
    slowest = sp.Max(*(times[k] for k in (*LEVELS, "arithmetic")), evaluate=False)
    times["total"] = slowest + t_kernel
    times["efficiency"] = s.flop_per_mac * d1 * d2 * b / (times["total"] * s.peak_flops)
    return times


# --- Derivations -----------------------------------------------------------------------------
@register
def min_nanobatch_derivation() -> Derivation:
    """The nanobatch below which streaming weights through HBM cannot hide behind arithmetic."""
    i1 = sp.Eq(intensity, s.flop_per_mac * d1 * d2 * b / q_hbm)
    gradients = Substitution(
        "the running gradient streams through HBM; activations neglected",
        {q_hbm: weight_traffic("weight-grad")},
        kind="assumption",
    )
    i2 = gradients.apply(i1)
    balance = Substitution(
        "HBM keeps up exactly when the intensity equals the GPU's balance",
        {intensity: s.eff_util * s.peak_flops / bw_hbm},
        kind="assumption",
    )
    i3 = balance.apply(i2)
    i4 = sp.Eq(b, sp.solve(i3, b)[0])
    title = "The minimum nanobatch of a weight-streaming matmul"
    return derivation(
        "matmul-min-nanobatch",
        title,
        [
            Step(
                "The arithmetic intensity of a matmul at HBM is its FLOP (one multiply-accumulate "
                "per weight per token) over the bytes it moves to and from HBM.",
                i1,
            ),
            Step(
                "When the shard is too large for L2, the weight-gradient pass loads and stores "
                "every gradient word; beside that the activations are small.  The shard's size "
                "cancels: the intensity grows with the nanobatch alone.",
                i2,
                using=gradients,
            ),
            Step(
                "HBM time hides behind arithmetic time once the intensity reaches the ratio of "
                "the derated FLOP rate to HBM bandwidth.",
                i3,
                using=balance,
            ),
            Step(
                "Solving for the nanobatch gives the smallest that keeps HBM off the critical "
                "path.",
                i4,
                solve_for=b,
            ),
        ],
        chapter=CHAPTER,
        notes=(
            "Erdil & Schneider-Joseph (2024) state the same threshold per 8-GPU node at the peak "
            "rate (eta = 1); min_nanobatch(scn, derated=False) gives that number.",
        ),
    )


MULTICAST = Substitution(
    "a multicast sends each value once, and each of the other SMs of the column of tiles "
    "receives it",
    {n_tx: 1, n_rx: tile_rows - 1},
    kind="assumption",
    source="erdil2024datamovement",
)


@register
def multicast_derivation() -> Derivation:
    """Shared-memory traffic between SMs in a forward pass with distributed shared memory."""
    m1 = sp.Eq(q_mc, (n_tx + n_rx) * word * d2 * b + 2 * (tile_cols - 1) * word * d1 * b)
    m2 = MULTICAST.apply(m1)
    return derivation(
        "matmul-multicast",
        "What distributed shared memory moves between SMs",
        [
            Step(
                "With $r_{\\mathrm{t}} \\times c_{\\mathrm{t}}$ per-SM tiles, the "
                "$r_{\\mathrm{t}}$ SMs of a column of tiles, one in each row, need the same "
                "input values, and transfers between SMs "
                "are counted at both ends: each value costs its sends and receives. Each of the "
                "$c_{\\mathrm{t}} - 1$ SMs that does not own a partial output sends it, and the "
                "owner receives it: two transfers each.",
                m1,
            ),
            Step(
                "A multicast reaches all the SMs that need a value with one send, the input "
                "crossing $r_{\\mathrm{t}}$ times. This holds for more than one row of tiles; "
                "with a single row no other SM needs the input, and the model charges nothing "
                "for it.",
                m2,
                using=MULTICAST,
            ),
        ],
        chapter=CHAPTER,
        notes=(
            "The weight gradient's $d_1 \\times b$ operand is multicast along the "
            "$c_{\\mathrm{t}}$ columns the same way: $c_{\\mathrm{t}}$ transfers.  Counting a "
            "separate send for every receiver ($n_{\\mathrm{tx}} = r_{\\mathrm{t}} - 1$) would "
            "double the input's traffic to $2 (r_{\\mathrm{t}} - 1) w d_2 b$.",
        ),
    )


@register
def hbm_time_derivation() -> Derivation:
    """HBM time of a forward pass whose weights stream from HBM, with square L2 tiles."""
    t1 = sp.Eq(t_hbm, q_hbm / bw_hbm)
    crossing = Substitution(
        "bytes crossing the HBM-L2 boundary (weights streamed)",
        {q_hbm: boundary_traffic("forward", tile_rows, tile_cols, 1)},
    )
    t2 = crossing.apply(t1)
    side = sp.sqrt(usable * cap_l2 / word)  # side, in words, of a square tile filling usable L2
    square = Substitution(
        "square tiles filling the usable L2 (tile count not rounded)",
        {tile_rows: d1 / side, tile_cols: d2 / side},
        kind="assumption",
    )
    t3 = square.apply(t2)
    t4 = sp.Eq(
        t_hbm, word * d1 * d2 / bw_hbm * (1 + 3 * b * sp.sqrt(word / (usable * cap_l2)) - b / d2)
    )
    return derivation(
        "matmul-hbm-time",
        "HBM time of a forward matmul",
        [
            Step("The time at one level is the bytes that cross it over its bandwidth.", t1),
            Step(
                "Forward pass, weights too big for L2: the weights come down once, the input once "
                "per row of L2 tiles, and the output is accumulated once per column of tiles.",
                t2,
                using=crossing,
            ),
            Step(
                "With square tiles that fill the usable L2, the rows and columns of tiles are the "
                "shard's sides over the tile's side.",
                t3,
                using=square,
            ),
            Step(
                "So activations add to the weight traffic a fraction of about three times the "
                "nanobatch over the tile's side (once in, twice for the accumulated output): they "
                "matter once b approaches a third of that side.",
                t4,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def arithmetic_bound_derivation() -> Derivation:
    """Efficiency of an arithmetic-bound matmul: the derate, lowered by the kernel latency."""
    e1 = sp.Eq(efficiency, s.flop_per_mac * d1 * d2 * b / (t_matmul * s.peak_flops))
    bound = Substitution(
        "arithmetic binds (no memory level is slower)",
        {t_matmul: t_arith + t_kernel},
        kind="assumption",
    )
    e2 = bound.apply(e1)
    arith = Substitution(
        "arithmetic time: padded dimensions at the derated rate",
        {t_arith: cost_expressions("forward", False)["arithmetic"]},
    )
    e3 = arith.apply(e2)
    whole = Substitution(
        "every dimension already a multiple of g",
        {padded(x): x for x in (d1, d2, b)},
        kind="assumption",
    )
    e4 = whole.apply(e3)
    e5 = sp.Eq(
        efficiency,
        s.eff_util / (1 + s.eff_util * s.peak_flops * t_kernel / (s.flop_per_mac * d1 * d2 * b)),
    )
    return derivation(
        "matmul-arithmetic-bound",
        "Efficiency of an arithmetic-bound matmul",
        [
            Step(
                "Efficiency is useful FLOP over what the peak rate could do in the matmul's time.",
                e1,
            ),
            Step(
                "When arithmetic is the slowest part, the time is the arithmetic time plus the "
                "kernel latency.",
                e2,
                using=bound,
            ),
            Step(
                "Arithmetic runs at the derated rate on dimensions padded to the tensor-core "
                "multiple.",
                e3,
                using=arith,
            ),
            Step("Take dimensions that need no padding.", e4, using=whole),
            Step(
                "So efficiency approaches the derate, less a latency term that fades as the work "
                "grows.",
                e5,
            ),
        ],
        chapter=CHAPTER,
    )


# --- Checks ----------------------------------------------------------------------------------
def check_kind(kind: Any) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: expected one of {', '.join(map(repr, KINDS))}")
    return kind


def hardware_values(scn: Scenario) -> tuple[float, ...]:
    values = [float(scn[key]) for key in _SCENARIO_KEYS.values()]
    return (*values, float(scn.peak_flops))


def hardware_key(scn: Scenario) -> tuple:
    """Every value of ``scn`` that a matmul's time reads: two scenarios with the same key give
    every matmul the same time (the search keeps its matmul times under it)."""
    scn = require_scenario(scn)
    return (bool(scn["hardware.distributed_shared_memory"]), *hardware_values(scn))


# --- Numeric functions, lambdified from the expressions above -----------------------------
PARTS = (*LEVELS, "arithmetic", "latency")  # lambdified one by one
_COMBINED = ("total", "efficiency")  # built from the parts in numpy


@cache
def numeric_parts(kind: str, multicast: bool):
    """The parts of :func:`cost_expressions`, lambdified together.  ``total`` and
    ``efficiency`` are not: sympy's ``Max`` of the long level expressions is slow to build for
    each kind, so :func:`numeric_combined` composes them from the parts instead."""

    def build():
        exprs = cost_expressions(kind, multicast)
        body = [CONSTANTS.replace(exprs[k], compare_min_max=False) for k in PARTS]
        return (d1, d2, b, *HARDWARE), body

    return formula_cache.lambdified(f"matmul.parts {kind} {multicast}", build, cse=True)


@cache
def numeric_combined(kind: str, multicast: bool):
    """``total`` and ``efficiency`` as functions of the parts: the expressions of
    :func:`cost_expressions` with each part replaced by a plain symbol (checked in the tests
    against the full expressions)."""

    def build():
        exprs = cost_expressions(kind, multicast)
        stand_ins = {name: sp.Symbol(f"part_{name}", positive=True) for name in PARTS}
        total = sp.Max(*(stand_ins[k] for k in (*LEVELS, "arithmetic"))) + stand_ins["latency"]
        # The efficiency's own expression with the stand-ins' total put in for its total (a
        # structural replacement, checked in the tests, which spares each kind a simplification
        # of the quotient of the two totals).
        efficiency = exprs["efficiency"].xreplace({exprs["total"]: total})
        body = [CONSTANTS.replace(e) for e in (total, efficiency)]
        return (*stand_ins.values(), d1, d2, b, *HARDWARE), body

    return formula_cache.lambdified(f"matmul.combined {kind} {multicast}", build)


def numeric(kind: str, multicast: bool, what: tuple[str, ...]):
    parts_fn = numeric_parts(kind, multicast)

    def evaluate(x1: Any, x2: Any, nb: Any, *hardware: float) -> list[Any]:
        shape = np.broadcast_shapes(np.shape(x1), np.shape(x2), np.shape(nb))
        parts = [
            np.broadcast_to(np.asarray(v, dtype=float), shape)
            for v in parts_fn(x1, x2, nb, *hardware)
        ]
        values = dict(zip(PARTS, parts, strict=True))
        if any(k in _COMBINED for k in what):
            combined = numeric_combined(kind, multicast)(*parts, x1, x2, nb, *hardware)
            values.update(zip(_COMBINED, combined, strict=True))
        return [values[k] for k in what]

    return evaluate


def _evaluate(
    scn: Any, x1: Any, x2: Any, nb: Any, kind: Any, what: tuple[str, ...]
) -> list[np.ndarray | float]:
    scn = require_scenario(scn)
    kind = check_kind(kind)
    a1 = numbers("d1", x1, strict=True)
    a2 = numbers("d2", x2, strict=True)
    ab = numbers("b", nb, strict=True)
    shape = np.broadcast_shapes(a1.shape, a2.shape, ab.shape)
    multicast = bool(scn["hardware.distributed_shared_memory"])
    out = numeric(kind, multicast, what)(a1, a2, ab, *hardware_values(scn))
    return [as_output(value, shape) for value in out]


def matmul_time(scn: Scenario, d1: Any, d2: Any, b: Any, kind: str) -> np.ndarray | float:
    """Seconds for one matmul of a ``d1 x d2`` weight shard and ``b`` tokens on one GPU.

    ``kind`` is ``"forward"``, ``"activation-grad"`` or ``"weight-grad"``; ``d1``, ``d2``, ``b``
    broadcast as numpy arrays (a float comes back for scalars).  Erdil & Schneider-Joseph (2024);
    the single-GPU model of the authors' final code, ``gpu/gpu_model.py``.
    """
    return _evaluate(scn, d1, d2, b, kind, ("total",))[0]


def matmul_efficiency(scn: Scenario, d1: Any, d2: Any, b: Any, kind: str) -> np.ndarray | float:
    """``2 d1 d2 b / (time x peak FLOP/s)``: the fraction of peak one matmul achieves."""
    return _evaluate(scn, d1, d2, b, kind, ("efficiency",))[0]


def level_times(
    scn: Scenario, d1: Any, d2: Any, b: Any, kind: str
) -> dict[str, np.ndarray | float]:
    """Each part of a matmul's time: ``hbm``, ``l2``, ``shared``, ``arithmetic``, ``latency``
    and ``total`` (seconds), plus ``binding``, the name of the slowest of the first four."""
    keys = (*LEVELS, "arithmetic", "latency", "total")
    values = _evaluate(scn, d1, d2, b, kind, keys)
    out: dict[str, Any] = dict(zip(keys, values, strict=True))
    stacked = np.stack([np.asarray(out[k]) for k in (*LEVELS, "arithmetic")])
    names = np.array([*LEVELS, "arithmetic"])
    binding = names[np.argmax(stacked, axis=0)]
    out["binding"] = str(binding) if binding.ndim == 0 else binding
    return out


@cache
def _min_nanobatch_function():
    rhs = min_nanobatch_derivation().result.rhs
    return sp.lambdify((word, s.eff_util, s.peak_flops, bw_hbm), CONSTANTS.apply(rhs), "numpy")


def min_nanobatch(scn: Scenario, derated: bool = True) -> float:
    """Tokens per matmul below which streaming the weights from HBM cannot hide behind
    arithmetic (the ``matmul-min-nanobatch`` derivation).

    ``derated=False`` uses the peak rate instead of the derated one, as the paper's closed form
    for the critical compute does (Erdil & Schneider-Joseph 2024; the authors' final code,
    ``layer_and_batch_scaling.ipynb``).
    """
    scn = require_scenario(scn)
    if not isinstance(derated, bool):
        raise ValueError(f"derated: got {derated!r}; expected True or False")
    eta = float(scn["hardware.effective_utilization"]) if derated else 1.0
    return float(
        _min_nanobatch_function()(
            float(scn["model.word_bytes"]),
            eta,
            float(scn.peak_flops),
            float(scn["hardware.hbm_bandwidth"]),
        )
    )


# --- The hierarchy in numbers ----------------------------------------------------------------
@cache
def _hardware_function(exprs: tuple[sp.Expr, ...]):
    body = [CONSTANTS.replace(e) for e in exprs]
    return sp.lambdify((d1, d2, *HARDWARE), body, "numpy")


def _hardware_numbers(scn: Scenario, exprs: tuple[sp.Expr, ...], x1=1.0, x2=1.0) -> list:
    return _hardware_function(exprs)(x1, x2, *hardware_values(scn))


def memory_levels(scn: Scenario) -> dict[str, float]:
    """Bandwidths (byte/s) and usable capacities (bytes) of one GPU's hierarchy, as the model
    uses them.

    Keys: ``hbm_bandwidth``, ``l2_bandwidth``, ``shared_bandwidth`` (banks x bank width x SMs x
    derated clock); ``l2_usable`` (the usable L2), ``sm_registers_usable`` (one SM's usable
    registers), ``all_registers_usable`` (every SM's), ``block_registers_usable`` and
    ``accumulator_tile_usable`` (the room of one tile at the shared-memory boundary: a block's
    registers, or Blackwell's tensor memory; :func:`boundary_capacities`); and
    ``l2_resident_weights`` and ``registers_resident_weights``, the most weights whose values
    and gradients stay in L2 and in the registers.
    """
    scn = require_scenario(scn)
    room = boundary_capacities(False)
    per_weight = resident_bytes() / (d1 * d2)
    exprs = (
        bw_hbm,
        bw_l2,
        shared_bandwidth(),
        room["hbm-l2"],
        room["l2-sm"],  # one SM's usable registers, without multicast
        room["registers-resident"],
        room["l2-sm"] / n_blocks,
        room["shared-registers"],
        room["l2-resident"] / per_weight,
        room["registers-resident"] / per_weight,
    )
    keys = (
        "hbm_bandwidth",
        "l2_bandwidth",
        "shared_bandwidth",
        "l2_usable",
        "sm_registers_usable",
        "all_registers_usable",
        "block_registers_usable",
        "accumulator_tile_usable",
        "l2_resident_weights",
        "registers_resident_weights",
    )
    return {k: float(v) for k, v in zip(keys, _hardware_numbers(scn, exprs), strict=True)}


def tiling(scn: Scenario, d1: Any, d2: Any) -> dict[str, dict[str, float]]:
    """How a ``d1 x d2`` weight shard is tiled at each boundary of ``scn``'s GPU.

    For each of :data:`BOUNDARIES` (``sm-sm`` only with distributed shared memory): ``tiles``
    (the fewest that fit), ``rows`` and ``cols`` of tiles (fractional, as in the model), and the
    tile's ``height`` and ``width`` in words.  Scalars only.
    """
    scn = require_scenario(scn)
    a1, a2 = float(numbers("d1", d1, strict=True)), float(numbers("d2", d2, strict=True))
    room = boundary_capacities(bool(scn["hardware.distributed_shared_memory"]))
    names = [k for k in BOUNDARIES if k in room]
    exprs = tuple(e for k in names for e in tile_grid(room[k]))
    values = _hardware_numbers(scn, exprs, a1, a2)
    out = {}
    for i, name in enumerate(names):
        k, rows, cols = (float(x) for x in values[3 * i : 3 * i + 3])
        out[name] = {
            "tiles": k,
            "rows": rows,
            "cols": cols,
            "height": a1 / rows,
            "width": a2 / cols,
        }
    return out


def weights_streamed(scn: Scenario, d1: Any, d2: Any) -> dict[str, bool]:
    """Whether a ``d1 x d2`` shard's weights and gradients stream from HBM into L2 (``hbm``) and
    from L2 into the SMs (``l2``), or stay resident below that boundary."""
    scn = require_scenario(scn)
    a1, a2 = float(numbers("d1", d1, strict=True)), float(numbers("d2", d2, strict=True))
    room = boundary_capacities(False)
    exprs = (streamed(room["l2-resident"]), streamed(room["registers-resident"]))
    hbm, l2 = _hardware_numbers(scn, exprs, a1, a2)
    return {"hbm": bool(hbm), "l2": bool(l2)}


@cache
def traffic_function(kind: str, multicast: bool):
    def build():
        q = traffic_expressions(kind, multicast)
        return (d1, d2, b, *HARDWARE), [CONSTANTS.replace(q[k]) for k in LEVELS]

    return formula_cache.lambdified(f"matmul.traffic {kind} {multicast}", build, cse=True)


def level_traffic(
    scn: Scenario, d1: Any, d2: Any, b: Any, kind: str
) -> dict[str, np.ndarray | float]:
    """Bytes one matmul moves through HBM, L2 and shared memory (keys of :data:`LEVELS`);
    each over its bandwidth is that level's time in :func:`level_times`."""
    scn = require_scenario(scn)
    kind = check_kind(kind)
    a1 = numbers("d1", d1, strict=True)
    a2 = numbers("d2", d2, strict=True)
    ab = numbers("b", b, strict=True)
    shape = np.broadcast_shapes(a1.shape, a2.shape, ab.shape)
    multicast = bool(scn["hardware.distributed_shared_memory"])
    values = traffic_function(kind, multicast)(a1, a2, ab, *hardware_values(scn))
    out: dict[str, np.ndarray | float] = {}
    for key, value in zip(LEVELS, values, strict=True):
        arr = np.broadcast_to(np.asarray(value, dtype=float), shape)
        out[key] = float(arr) if shape == () else np.array(arr)
    return out


def pass_efficiency(scn: Scenario, d1: Any, d2: Any, b: Any) -> np.ndarray | float:
    """Efficiency of the three matmuls of one ``d1 x d2`` weight matrix on ``b`` tokens.

    The forward pass and the weight gradient use the shard as it is; the activation gradient
    multiplies by its transpose, a ``d2 x d1`` operand.  Their useful FLOP over their summed
    time at the peak rate (a training step runs all three for every weight matrix).
    """
    total = (
        matmul_time(scn, d1, d2, b, "forward")
        + matmul_time(scn, d2, d1, b, "activation-grad")
        + matmul_time(scn, d1, d2, b, "weight-grad")
    )
    useful = len(KINDS) * _useful_flop(d1, d2, b)
    result = useful / (total * require_scenario(scn).peak_flops)
    return float(result) if np.ndim(result) == 0 else result


def _useful_flop(d1: Any, d2: Any, b: Any) -> np.ndarray:
    """One multiply-accumulate per weight per token (no padding)."""
    return FLOP_PER_MAC * np.asarray(d1, float) * np.asarray(d2, float) * np.asarray(b, float)


def arithmetic_intensity(
    scn: Scenario, d1: Any, d2: Any, b: Any, kind: str
) -> dict[str, np.ndarray | float]:
    """Useful FLOP per byte moved at each level (keys of :data:`LEVELS`)."""
    q = level_traffic(scn, d1, d2, b, kind)
    flop = _useful_flop(d1, d2, b)
    out: dict[str, np.ndarray | float] = {}
    for key in LEVELS:
        value = flop / np.asarray(q[key])
        out[key] = float(value) if np.ndim(value) == 0 else value
    return out


def machine_balance(scn: Scenario) -> dict[str, float]:
    """The derated FLOP rate over each level's bandwidth (FLOP per byte): a level keeps up with
    the arithmetic when a matmul's :func:`arithmetic_intensity` there is at least this."""
    scn = require_scenario(scn)
    rate = float(scn["hardware.effective_utilization"]) * scn.peak_flops
    levels = memory_levels(scn)
    return {key: rate / levels[f"{key}_bandwidth"] for key in LEVELS}


# --- The paper's printed table ---------------------------------------------------------------
_TABLE_FILE = "paper1_matmul_efficiency.csv"
_SET_PREFIX = "# scenario-set:"


def printed_table() -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """The H100 efficiencies printed by the authors' code (Erdil & Schneider-Joseph 2024), and the
    ``key=value`` scenario settings of the hardware they were printed with (the file's header).

    Each row: ``gpu``, ``d1``, ``d2``, ``kind``, ``nanobatch`` (ints where whole) and the printed
    ``efficiency``.
    """
    lines = published.data_path(_TABLE_FILE).read_text().splitlines()
    sets = tuple(ln[len(_SET_PREFIX) :].strip() for ln in lines if ln.startswith(_SET_PREFIX))
    rows = []
    for row in csv.DictReader(ln for ln in lines if not ln.startswith("#")):
        rows.append(
            {
                "gpu": row["gpu"],
                "d1": int(row["d1"]),
                "d2": int(row["d2"]),
                "kind": check_kind(row["kind"]),
                "nanobatch": int(row["nanobatch"]),
                "efficiency": float(row["efficiency"]),
            }
        )
    return rows, sets


# --- Figures ---------------------------------------------------------------------------------
#: How the book names each part of a matmul's time (the keys of :func:`level_times`) in prose and
#: legends.
LEVEL_LABELS = {
    "hbm": "HBM",
    "l2": "L2",
    "shared": "shared memory",
    "arithmetic": "arithmetic",
    "latency": "kernel latency",
}
