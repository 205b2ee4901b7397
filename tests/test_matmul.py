"""The single-GPU matmul model (dmlimits.costs.matmul) against the paper's printed table and
itself."""

from __future__ import annotations

import csv
from importlib import resources

import numpy as np
import pytest
import sympy as sp
from conftest import derivations_of
from dmlimits.core import derivation
from dmlimits.core import scenario as sc
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.symbols import REGISTRY
from dmlimits.costs import matmul

TABLE = resources.files("dmlimits") / "data" / "paper1_matmul_efficiency.csv"
SET_PREFIX = "# scenario-set:"


def _table() -> tuple[list[dict[str, str]], list[str]]:
    """Rows of the printed table, and the scenario settings its header records."""
    lines = TABLE.read_text().splitlines()
    sets = [line[len(SET_PREFIX) :].strip() for line in lines if line.startswith(SET_PREFIX)]
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    return rows, sets


ROWS, TABLE_SETS = _table()


def _row_id(row: dict[str, str]) -> str:
    return f"{row['gpu']}-{row['d1']}x{row['d2']}-{row['kind']}-b{row['nanobatch']}"


def _args(row: dict[str, str]) -> tuple[int, int, int, str]:
    return int(row["d1"]), int(row["d2"]), int(row["nanobatch"]), row["kind"]


def test_table_has_fifteen_entries():
    assert len(ROWS) == 15
    assert {r["kind"] for r in ROWS} <= set(matmul.KINDS)


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_printed_table_reproduced(row):
    """Each printed efficiency, with the hardware the printing run used (the CSV's header)."""
    scn = sc.resolve(row["gpu"], sets=TABLE_SETS)
    got = matmul.matmul_efficiency(scn, *_args(row))
    assert abs(got - float(row["efficiency"])) <= 0.01, (got, row)


def test_the_table_is_printed_with_the_preset_as_it_is():
    """No hardware override: the h100 preset is the hardware of the authors' final code."""
    assert TABLE_SETS == []
    h100 = sc.resolve("h100")
    assert h100["hardware.max_clock"] == 1830e6
    assert h100["hardware.flop_per_clock_per_thread"] == 32


def test_some_printed_entries_are_bound_by_shared_memory():
    """The table tests the multicast count: shared memory binds some of its entries."""
    scn = sc.resolve("h100")
    binds = [matmul.level_times(scn, *_args(r))["binding"] for r in ROWS]
    assert "shared" in binds


def test_a_multicast_is_one_send_per_value():
    """A hand count: with r rows of per-SM tiles every input value is sent once and received by
    the r - 1 other SMs (r transfers); a forward pass's c - 1 partial outputs are each sent and
    received (2 (c - 1)); the weight gradient's d1 x b operand is multicast along c columns."""
    r, c = sp.symbols("r c", positive=True)
    subs = {matmul.word: 2, matmul.d1: 5, matmul.d2: 7, matmul.b: 3}
    for rows_, cols_ in ((3, 4), (1, 4), (3, 1)):
        send_recv_in = rows_ if rows_ > 1 else 0
        fwd = send_recv_in * 2 * 7 * 3 + 2 * (cols_ - 1) * 2 * 5 * 3
        wg = send_recv_in * 2 * 7 * 3 + (cols_ if cols_ > 1 else 0) * 2 * 5 * 3
        got = matmul.multicast_traffic("forward", r, c).subs(subs).subs({r: rows_, c: cols_})
        assert got == fwd
        got = matmul.multicast_traffic("weight-grad", r, c).subs(subs).subs({r: rows_, c: cols_})
        assert got == wg


def _matmul_derivations() -> list[derivation.Derivation]:
    return derivations_of("costs.matmul")


def test_derivations_are_registered():
    found = _matmul_derivations()
    assert len(found) >= 2
    for d in found:
        assert d.chapter == "matmul"


def test_min_nanobatch_is_its_derivation_and_a_threshold():
    scn = sc.resolve("h100")
    n = matmul.min_nanobatch(scn)
    assert matmul.min_nanobatch(scn, derated=False) == pytest.approx(
        n / scn["hardware.effective_utilization"]
    )
    # A shard far larger than L2: HBM binds the weight-gradient pass below the threshold and
    # hides behind arithmetic above it (activation traffic blurs the exact crossing).
    side = 65536
    below = matmul.level_times(scn, side, side, 0.75 * n, "weight-grad")
    above = matmul.level_times(scn, side, side, 1.5 * n, "weight-grad")
    assert below["hbm"] > below["arithmetic"]
    assert above["hbm"] < above["arithmetic"]


@pytest.mark.parametrize("multicast", [False, True])
@pytest.mark.parametrize("kind", matmul.KINDS)
def test_cost_expressions_are_in_seconds(kind, multicast):
    exprs = matmul.cost_expressions(kind, multicast)
    for key in (*matmul.LEVELS, "arithmetic", "latency", "total"):
        assert not REGISTRY.unregistered(exprs[key]), key
        u.check_unit(exprs[key], REGISTRY.units, u.second)
    u.check_unit(exprs["efficiency"], REGISTRY.units, u.one)


@pytest.mark.parametrize("gpu", ["h100", "a100"])
@pytest.mark.parametrize("kind", matmul.KINDS)
def test_vectorized_matches_scalar(gpu, kind):
    scn = sc.resolve(gpu)
    rng = np.random.default_rng(7)
    d1 = rng.integers(1, 40_000, 40)
    d2 = rng.integers(1, 40_000, 40)
    b = rng.integers(1, 8_000, 40)
    vec = matmul.matmul_time(scn, d1, d2, b, kind)
    assert vec.shape == (40,)
    for i in range(40):
        one = matmul.matmul_time(scn, int(d1[i]), int(d2[i]), int(b[i]), kind)
        assert isinstance(one, float)
        assert vec[i] == pytest.approx(one, rel=1e-12)
    # Broadcasting: a column of d1 against a row of b.
    grid = matmul.matmul_time(scn, d1[:5, None], 4096, b[None, :7], kind)
    assert grid.shape == (5, 7)
    assert grid[2, 3] == pytest.approx(matmul.matmul_time(scn, int(d1[2]), 4096, int(b[3]), kind))


def test_level_times_are_consistent():
    scn = sc.resolve("h100")
    b = np.array([8, 64, 512, 4096])
    parts = matmul.level_times(scn, 8192, 32768, b, "weight-grad")
    slowest = np.max([parts[k] for k in (*matmul.LEVELS, "arithmetic")], axis=0)
    np.testing.assert_allclose(parts["total"], slowest + parts["latency"])
    np.testing.assert_allclose(
        parts["total"], matmul.matmul_time(scn, 8192, 32768, b, "weight-grad")
    )
    eff = matmul.matmul_efficiency(scn, 8192, 32768, b, "weight-grad")
    np.testing.assert_allclose(eff, 2 * 8192 * 32768 * b / (parts["total"] * scn.peak_flops))


@pytest.mark.parametrize("gpu", ["h100", "a100", "v100"])
@pytest.mark.parametrize("shape", [(4096, 16384), (16384, 4096), (12288, 49152), (8192, 8192)])
@pytest.mark.parametrize("kind", matmul.KINDS)
def test_efficiency_monotone_in_nanobatch_for_large_shards(gpu, shape, kind):
    scn = sc.resolve(gpu)
    b = np.arange(8, 16_385, 8)  # multiples of the padding, so padding adds no jitter
    eff = matmul.matmul_efficiency(scn, *shape, b, kind)
    assert np.all(np.diff(eff) >= -1e-12)


def test_bad_kind_names_value_and_choices():
    scn = sc.resolve("h100")
    with pytest.raises(ValueError) as err:
        matmul.matmul_time(scn, 1024, 1024, 128, "backward")
    message = str(err.value)
    assert "'backward'" in message
    for kind in matmul.KINDS:
        assert kind in message


@pytest.mark.parametrize(
    "name,args",
    [
        ("b", (1024, 1024, -1)),
        ("d1", (0, 1024, 128)),
        ("d2", (1024, float("nan"), 128)),
        ("b", (1024, 1024, "many")),
        ("d1", (np.array([8, -8]), 1024, 128)),
    ],
)
def test_bad_dimensions_are_named(name, args):
    scn = sc.resolve("h100")
    expected = "expected finite numbers greater than 0"
    with pytest.raises(ValueError, match=rf"^{name}: got .+; {expected}$"):
        matmul.matmul_time(scn, *args, "forward")


def test_bad_scenario_is_named():
    with pytest.raises(ValueError, match="Scenario"):
        matmul.matmul_time("h100", 1024, 1024, 128, "forward")
    with pytest.raises(ValueError, match="derated"):
        matmul.min_nanobatch(sc.resolve("h100"), derated="yes")


@pytest.mark.parametrize("gpu", ["a100", "v100"])
@pytest.mark.parametrize("kind", matmul.KINDS)
def test_older_gpus_finite_and_below_derate(gpu, kind):
    scn = sc.resolve(gpu)
    d1, d2, b = np.meshgrid(
        [64, 1000, 4096, 32768],
        [64, 4096, 16384, 65536],
        [1, 8, 128, 1000, 4096, 65536],
        indexing="ij",
    )
    eff = matmul.matmul_efficiency(scn, d1, d2, b, kind)
    assert np.all(np.isfinite(eff))
    assert np.all(eff > 0)
    assert np.all(eff < scn["hardware.effective_utilization"])
    times = matmul.level_times(scn, d1, d2, b, kind)
    assert np.all(times["shared"] > 0)  # no multicast: every level still carries traffic


def test_arithmetic_bound_derivation_matches_the_numbers():
    """Where arithmetic binds, the closed form of the derivation is the model's efficiency."""
    scn = sc.resolve("h100")
    form = matmul.arithmetic_bound_derivation().result.rhs
    values = {
        s.eff_util: scn["hardware.effective_utilization"],
        s.peak_flops: scn.peak_flops,
        matmul.t_kernel: scn["hardware.kernel_latency"],
        s.flop_per_mac: matmul.FLOP_PER_MAC,
    }
    shape = (1024, 4096, 4096)
    assert matmul.level_times(scn, *shape, "forward")["binding"] == "arithmetic"
    closed = float(
        form.subs(values).subs(dict(zip((matmul.d1, matmul.d2, matmul.b), shape, strict=True)))
    )
    assert matmul.matmul_efficiency(scn, *shape, "forward") == pytest.approx(closed)


# --- The hierarchy in numbers, the pass efficiency and the printed table ----------------------
@pytest.mark.parametrize("gpu", ["h100", "b200"])
def test_memory_levels_follow_the_scenario(gpu):
    scn = sc.resolve(gpu)
    m = matmul.memory_levels(scn)
    eta = scn["hardware.effective_utilization"]
    assert m["hbm_bandwidth"] == scn["hardware.hbm_bandwidth"]
    assert m["l2_bandwidth"] == scn["hardware.l2_bandwidth"]
    assert m["shared_bandwidth"] == pytest.approx(
        matmul.SHARED_BANKS
        * matmul.BANK_BYTES
        * scn["hardware.sms"]
        * scn["hardware.max_clock"]
        * eta
    )
    assert m["l2_usable"] == pytest.approx(0.75 * scn["hardware.l2_size"])
    block = 0.75 * scn["hardware.register_file_per_block"]
    assert m["block_registers_usable"] == pytest.approx(block)
    # A tile at the shared-memory boundary: a block's registers, or the tensor memory of the SMs
    # one tensor-core instruction spans, whichever is larger (Blackwell's, the book's extension).
    tmem = 0.75 * scn["hardware.mma_sms"] * scn["hardware.tensor_memory_per_sm"]
    assert m["accumulator_tile_usable"] == pytest.approx(max(block, tmem))
    assert m["sm_registers_usable"] == pytest.approx(scn["hardware.blocks_per_sm"] * block)
    assert m["all_registers_usable"] == pytest.approx(
        scn["hardware.sms"] * m["sm_registers_usable"]
    )
    word = scn["model.word_bytes"]
    assert m["l2_resident_weights"] == pytest.approx(m["l2_usable"] / (2 * word))
    assert m["registers_resident_weights"] == pytest.approx(m["all_registers_usable"] / (2 * word))


@pytest.mark.parametrize("gpu", ["h100", "v100", "b200"])
def test_tiling_fits_capacity_and_follows_the_shard(gpu):
    scn = sc.resolve(gpu)
    m = matmul.memory_levels(scn)
    word = scn["model.word_bytes"]
    shard = (4096, 16384)
    tiles = matmul.tiling(scn, *shard)
    assert ("sm-sm" in tiles) == bool(scn["hardware.distributed_shared_memory"])
    room = {
        "hbm-l2": m["l2_usable"],
        "l2-sm": m["all_registers_usable"] if "sm-sm" in tiles else m["sm_registers_usable"],
        "sm-sm": m["sm_registers_usable"],
        "shared-registers": m["accumulator_tile_usable"],
    }
    for name, t in tiles.items():
        assert t["rows"] * t["cols"] == pytest.approx(t["tiles"])
        assert t["height"] * t["rows"] == pytest.approx(shard[0])
        assert t["width"] * t["cols"] == pytest.approx(shard[1])
        assert t["height"] * t["width"] * word <= room[name] * (1 + 1e-12)  # fits
        assert (t["tiles"] - 1) * room[name] < word * shard[0] * shard[1]  # the fewest that fit
        # As near square as the shard allows: square, or as tall as the shard.
        assert t["height"] == pytest.approx(t["width"]) or t["height"] == pytest.approx(shard[0])


def test_weights_streamed_at_the_residency_limits():
    scn = sc.resolve("h100")
    m = matmul.memory_levels(scn)
    small = int(m["registers_resident_weights"] ** 0.5) - 8
    assert matmul.weights_streamed(scn, small, small) == {"hbm": False, "l2": False}
    middle = int(m["l2_resident_weights"] ** 0.5) - 8
    assert middle**2 > m["registers_resident_weights"]
    assert matmul.weights_streamed(scn, middle, middle) == {"hbm": False, "l2": True}
    assert matmul.weights_streamed(scn, 4096, 16384) == {"hbm": True, "l2": True}


@pytest.mark.parametrize("gpu", ["h100", "a100"])
@pytest.mark.parametrize("kind", matmul.KINDS)
def test_level_traffic_over_bandwidth_is_level_time(gpu, kind):
    scn = sc.resolve(gpu)
    m = matmul.memory_levels(scn)
    b = np.array([8, 100, 1000, 8000])
    q = matmul.level_traffic(scn, 8192, 32768, b, kind)
    t = matmul.level_times(scn, 8192, 32768, b, kind)
    for level in matmul.LEVELS:
        np.testing.assert_allclose(q[level] / m[f"{level}_bandwidth"], t[level], rtol=1e-12)
    one = matmul.level_traffic(scn, 4096, 4096, 512, kind)
    assert all(isinstance(v, float) for v in one.values())


def test_pass_efficiency_combines_the_three_kinds():
    scn = sc.resolve("h100")
    d1, d2, b = 4096, 16384, np.array([64, 512, 4096])
    total = (
        matmul.matmul_time(scn, d1, d2, b, "forward")
        + matmul.matmul_time(scn, d2, d1, b, "activation-grad")
        + matmul.matmul_time(scn, d1, d2, b, "weight-grad")
    )
    got = matmul.pass_efficiency(scn, d1, d2, b)
    np.testing.assert_allclose(got, 3 * 2 * d1 * d2 * b / (total * scn.peak_flops))
    kinds = [
        matmul.matmul_efficiency(scn, d1, d2, b, "forward"),
        matmul.matmul_efficiency(scn, d2, d1, b, "activation-grad"),
        matmul.matmul_efficiency(scn, d1, d2, b, "weight-grad"),
    ]
    assert np.all(got <= np.max(kinds, axis=0) + 1e-12)
    assert np.all(got >= np.min(kinds, axis=0) - 1e-12)
    assert isinstance(matmul.pass_efficiency(scn, d1, d2, 512), float)


def test_printed_table_is_the_data_file():
    rows, sets = matmul.printed_table()
    assert sets == tuple(TABLE_SETS)
    assert len(rows) == len(ROWS)
    for got, raw in zip(rows, ROWS, strict=True):
        assert got == {
            "gpu": raw["gpu"],
            "d1": int(raw["d1"]),
            "d2": int(raw["d2"]),
            "kind": raw["kind"],
            "nanobatch": int(raw["nanobatch"]),
            "efficiency": float(raw["efficiency"]),
        }


@pytest.mark.parametrize("kind", matmul.KINDS)
def test_intensity_below_balance_is_the_level_binding(kind):
    scn = sc.resolve("h100")
    b = np.arange(8, 8193, 8)  # multiples of the padding: arithmetic time is exact
    d1, d2 = 8192, 32768
    intensity = matmul.arithmetic_intensity(scn, d1, d2, b, kind)
    balance = matmul.machine_balance(scn)
    times = matmul.level_times(scn, d1, d2, b, kind)
    for level in matmul.LEVELS:
        np.testing.assert_array_equal(
            intensity[level] < balance[level], times[level] > times["arithmetic"]
        )
    one = matmul.arithmetic_intensity(scn, 4096, 16384, 512, "forward")
    q = matmul.level_traffic(scn, 4096, 16384, 512, "forward")
    assert one["hbm"] == pytest.approx(2 * 4096 * 16384 * 512 / q["hbm"])


@pytest.mark.parametrize("multicast", [False, True])
@pytest.mark.parametrize("kind", ["forward", "activation-grad", "weight-grad"])
def test_fast_numeric_path_equals_the_full_expressions(kind, multicast):
    """The numeric path composes ``total`` and ``efficiency`` from lambdified parts; it must
    agree with the full sympy expressions of :func:`matmul.cost_expressions`."""
    import sympy as sp

    exprs = matmul.cost_expressions(kind, multicast)
    args = (matmul.d1, matmul.d2, matmul.b, *matmul.HARDWARE)
    full = sp.lambdify(args, [matmul.CONSTANTS.replace(exprs[k]) for k in ("total", "efficiency")])
    rng = np.random.default_rng(1)
    x1, x2, nb = (2.0 ** rng.integers(4, 17, size=40) for _ in range(3))
    scn = sc.resolve("gtx580" if multicast is False else "h100")
    hw = matmul.hardware_values(scn)
    fast = matmul.numeric(kind, multicast, ("total", "efficiency"))(x1, x2, nb, *hw)
    for got, want in zip(fast, full(x1, x2, nb, *hw), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("multicast", [False, True])
@pytest.mark.parametrize("kind", ["forward", "activation-grad", "weight-grad"])
def test_the_numeric_paths_shortcuts_leave_the_expressions_as_they_are(kind, multicast):
    """Three shortcuts build the numeric path without sympy's comparisons, and change no
    expression: ``total``'s Max, built unevaluated, is the Max sympy evaluates; each part with
    the constants put in and its Min and Max rebuilt unevaluated is the part sympy's xreplace
    gives; and the efficiency holds the total as a term of its own (the term the stand-ins'
    total replaces)."""
    exprs = matmul.cost_expressions(kind, multicast)
    slowest = sp.Max(*(exprs[k] for k in (*matmul.LEVELS, "arithmetic")))
    assert exprs["total"] == slowest + matmul.t_kernel
    for part in matmul.PARTS:
        fast = matmul.CONSTANTS.replace(exprs[part], compare_min_max=False)
        assert fast == matmul.CONSTANTS.replace(exprs[part]), part
    assert exprs["efficiency"].has(exprs["total"])


def test_multicast_traffic_is_its_derivation():
    """What the model charges between SMs is the derivation the chapter shows (for more than
    one row of tiles; with one row the input stays where it is)."""
    d = matmul.multicast_derivation().verify()
    r, c = matmul.tile_rows, matmul.tile_cols
    charged = matmul.multicast_traffic("forward", r, c)
    for rows_ in (2, 3, sp.Rational(7, 2)):
        assert sp.simplify((d.result.rhs - charged).subs(r, rows_)) == 0
    assert charged.subs(r, 1) == d.result.rhs.subs(r, 1) - matmul.word * matmul.d2 * matmul.b


def test_tensor_memory_changes_a_tile_only_when_it_is_the_larger_room():
    """The book's Blackwell extension: tensor memory smaller than a block's registers changes
    nothing (the paper's model), larger tensor memory shortens shared-memory time only."""
    b = np.array([256, 1024, 8192])
    base = sc.resolve("h100")
    registers = base["hardware.register_file_per_block"]
    small = sc.resolve("h100", [f"hardware.tensor_memory_per_sm={registers / 2}"])
    large = sc.resolve(
        "h100", [f"hardware.tensor_memory_per_sm={4 * registers}", "hardware.mma_sms=2"]
    )
    for kind in matmul.KINDS:
        t0 = matmul.level_times(base, 4096, 16384, b, kind)
        t_small = matmul.level_times(small, 4096, 16384, b, kind)
        t_large = matmul.level_times(large, 4096, 16384, b, kind)
        for key in (*matmul.LEVELS, "arithmetic"):
            np.testing.assert_array_equal(t_small[key], t0[key])
        assert np.all(t_large["shared"] < t0["shared"])
        for key in ("hbm", "l2", "arithmetic"):
            np.testing.assert_array_equal(t_large[key], t0[key])


@pytest.mark.parametrize("preset", ["h100", "v100"])
def test_the_hardware_key_holds_everything_a_matmul_reads(preset):
    """The search keeps matmul times under matmul.hardware_key: every value of a scenario
    that changes a matmul's time changes the key (each value is changed in turn, the others
    kept)."""
    base = sc.resolve(preset)
    d1, d2, b = np.array([4096.0, 512.0, 96.0]), np.array([16384.0, 2048.0, 33.0]), 1e4

    def times(scn):
        return [matmul.matmul_time(scn, d1, d2, b, kind) for kind in matmul.KINDS]

    before, key = times(base), matmul.hardware_key(base)
    read = 0
    for name, value in base.values.items():
        if isinstance(value, bool):
            changed = not value
        elif isinstance(value, int | float) and value > 0:
            changed = value * 1.5
        else:
            continue
        other = sc.Scenario(name=base.name, values={**base.values, name: changed})
        if matmul.hardware_key(other) == key:
            for a, c in zip(times(other), before, strict=True):
                np.testing.assert_array_equal(a, c, err_msg=name)
        else:
            read += 1
    assert read >= 5, read  # the key does hold the hardware's values
