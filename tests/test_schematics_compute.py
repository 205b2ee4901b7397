"""The compute schematics (dmlimits.book.schematics_compute): each is fit to read, legible at the
book's column, says its values in its alt text, and is redrawn by a changed assumption."""

from __future__ import annotations

import struct

import matplotlib.pyplot as plt
import numpy as np
import pytest
from dmlimits.book import figures, matmul_page, pipeline_page, schematics_compute
from dmlimits.book.glue import PngOutput, quantity
from dmlimits.core import scenario as sc
from dmlimits.costs import matmul
from dmlimits.costs import pipeline as ppm
from matplotlib.text import Text

SHARD = (4096, 16384)  # the largest shard of the authors' printed table
COLUMN_PX = figures.COLUMN_PX  # the book's column, in pixels
LEAST_POINTS = figures.MIN_TEXT_PT  # the smallest text a reader should meet in the column


@pytest.fixture(autouse=True)
def style():
    figures.apply_style()
    yield
    plt.close("all")


def h100(**overrides):
    return sc.resolve("h100", overrides=overrides)


def fit(fig) -> list[str]:
    """What glue checks before it stores a figure."""
    figures.fit_to_read(fig)
    return figures.check_figure(fig, drawn=True)


def texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def smallest_shown(fig) -> float:
    """The smallest font of the figure as the page shows it: the PNG scaled to the column."""
    png = PngOutput(fig).png
    width_px = struct.unpack(">I", png[16:20])[0]
    width_in = width_px / figures.SAVE_DPI
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text() and t.get_visible()]
    return min(sizes) * COLUMN_PX / (max(width_in, COLUMN_PX / figures.DPI) * figures.DPI)


# --- The tiles ---------------------------------------------------------------------------------
def test_memory_tiles_is_fit_legible_and_names_its_values():
    scn = h100()
    fig = schematics_compute.memory_tiles(scn, *SHARD, 512)
    assert fit(fig) == []
    assert smallest_shown(fig) >= LEAST_POINTS
    shown = texts(fig)
    levels = matmul.memory_levels(scn)
    tiles = matmul.tiling(scn, *SHARD)
    assert any(quantity(levels["hbm_bandwidth"], "byte/s") in t for t in shown)
    assert any(quantity(levels["l2_bandwidth"], "byte/s") in t for t in shown)
    l2 = tiles["hbm-l2"]
    assert any(f"{l2['height']:,.0f} × {l2['width']:,.0f}" in t for t in shown)
    # One row per level: HBM and one for each boundary the model tiles.
    rows = schematics_compute.hierarchy_levels(scn, *SHARD, 512)
    assert len(rows) == 1 + len(tiles)
    alt = schematics_compute.memory_tiles_alt(scn, *SHARD, 512)
    assert quantity(levels["hbm_bandwidth"], "byte/s") in alt
    assert f"{l2['height']:,.0f} × {l2['width']:,.0f}" in alt
    assert scn.gpu_label in alt and "512 tokens" in alt
    # Where the model has no number, the drawing says so instead of inventing one.
    assert any("no bandwidth" in t for t in shown)


def test_memory_tiles_follow_the_hardware():
    base = texts(schematics_compute.memory_tiles(h100(), *SHARD, 512))
    bw = 2 * h100()["hardware.hbm_bandwidth"]
    faster = texts(
        schematics_compute.memory_tiles(h100(**{"hardware.hbm_bandwidth": bw}), *SHARD, 512)
    )
    assert any(quantity(bw, "byte/s") in t for t in faster)
    assert not any(quantity(bw, "byte/s") in t for t in base)
    # A smaller L2 cuts the shard into more, smaller tiles.
    small = h100(**{"hardware.l2_size": h100()["hardware.l2_size"] / 4})
    tile = matmul.tiling(small, *SHARD)["hbm-l2"]
    label = f"{tile['height']:,.0f} × {tile['width']:,.0f}"
    assert any(label in t for t in texts(schematics_compute.memory_tiles(small, *SHARD, 512)))
    assert not any(label in t for t in base)
    # Without distributed shared memory there is no level of one SM spread from the others.
    plain = h100(**{"hardware.distributed_shared_memory": False})
    assert (
        len(schematics_compute.hierarchy_levels(plain, *SHARD, 512))
        == len(schematics_compute.hierarchy_levels(h100(), *SHARD, 512)) - 1
    )
    # A shard that fits in L2 with its gradients stays there, and the drawing says so.
    fits = schematics_compute.hierarchy_levels(h100(), 1024, 1024, 512)
    assert [r["name"] for r in fits if r["resident"]] == ["L2 cache"]
    assert any(
        "stay here" in t for t in texts(schematics_compute.memory_tiles(h100(), 1024, 1024, 512))
    )


def test_blackwell_tiles_accumulate_in_tensor_memory():
    b200 = sc.resolve("b200")
    last = schematics_compute.hierarchy_levels(b200, *SHARD, 512)[-1]
    assert last["name"] == f"tensor memory of {int(b200['hardware.mma_sms'])} SMs"
    assert last["capacity"] == matmul.memory_levels(b200)["accumulator_tile_usable"]
    assert schematics_compute.hierarchy_levels(h100(), *SHARD, 512)[-1]["name"] == (
        "one processing block"
    )


def test_memory_tiles_name_the_operands_of_each_kind():
    for kind in matmul.KINDS:
        shown = texts(schematics_compute.memory_tiles(h100(), *SHARD, 512, kind))
        assert all(name in shown for name in schematics_compute.OPERANDS[kind])
    with pytest.raises(ValueError, match="kind 'sideways'"):
        schematics_compute.memory_tiles(h100(), *SHARD, 512, "sideways")


# --- The roofline ------------------------------------------------------------------------------
def test_roofline_places_the_models_own_points():
    scn = h100()
    fig = schematics_compute.roofline(scn, *SHARD)
    assert fit(fig) == []
    assert smallest_shown(fig) >= LEAST_POINTS
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert ax.get_xlabel() and ax.get_ylabel()
    nb = np.array(schematics_compute.ROOFLINE_NANOBATCHES, dtype=float)
    forward = next(line for line in ax.get_lines() if line.get_label() == "model: forward")
    x, y = forward.get_xydata().T
    assert np.allclose(x, matmul.arithmetic_intensity(scn, *SHARD, nb, "forward")["hbm"])
    assert np.allclose(
        y, matmul.matmul_efficiency(scn, *SHARD, nb, "forward") * scn.peak_flops / 1e12
    )
    # No matmul of the model beats its roof.
    roof = np.minimum(x * scn["hardware.hbm_bandwidth"],
                      scn["hardware.effective_utilization"] * scn.peak_flops)  # fmt: skip
    assert np.all(y <= roof / 1e12 * (1 + 1e-9))
    ridge = schematics_compute.ridge_point(scn)
    assert ridge == pytest.approx(matmul.machine_balance(scn)["hbm"])
    assert any(f"{ridge:,.0f} FLOP/byte" in t for t in texts(fig))
    alt = schematics_compute.roofline_alt(scn, *SHARD)
    assert f"{ridge:,.0f} FLOP per byte" in alt
    assert quantity(scn["hardware.hbm_bandwidth"], "byte/s") in alt


def test_roofline_ridge_moves_with_bandwidth_and_peak():
    def ridge_drawn(scn):
        fig = schematics_compute.roofline(scn, *SHARD)
        (segment,) = fig.axes[0].collections[0].get_segments()
        return float(segment[0, 0])

    base = h100()
    assert ridge_drawn(base) == pytest.approx(schematics_compute.ridge_point(base))
    wider = h100(**{"hardware.hbm_bandwidth": 2 * base["hardware.hbm_bandwidth"]})
    assert ridge_drawn(wider) == pytest.approx(ridge_drawn(base) / 2)
    key = "hardware.flop_per_clock_per_thread"
    faster = h100(**{key: 2 * base[key]})
    assert ridge_drawn(faster) == pytest.approx(2 * ridge_drawn(base))


# --- The pipeline schedule ---------------------------------------------------------------------
def bars(fig) -> list[int]:
    """The passes drawn in each panel (one path per pass)."""
    return [sum(len(c.get_paths()) for c in ax.collections) for ax in fig.axes]


def test_pipeline_schedule_is_fit_legible_and_labels_the_bubble():
    fig = schematics_compute.pipeline_schedule(4, 8, 2, steps=2)
    assert fit(fig) == []
    assert smallest_shown(fig) >= LEAST_POINTS
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert f"{ppm.bubble_fraction(4, 8):.1%}" in titles[0]
    assert f"{ppm.bubble_fraction(4, 8, 2):.1%}" in titles[1]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"forward", "backward", "idle (bubble)"} <= set(legend)
    # The grey idle patches add up to the bubble of every flush.
    plain = ppm.schedule(4, 8)
    idle = sum(p.get_width() for p in fig.axes[0].patches)
    assert idle == pytest.approx(2 * 4 * plain.makespan * float(plain.bubble))
    alt = schematics_compute.pipeline_schedule_alt(4, 8, 2, steps=2)
    assert f"{ppm.bubble_fraction(4, 8):.1%}" in alt and "4 GPUs" in alt


@pytest.mark.parametrize(
    "change", [{"n_pp": 2}, {"m": 12}, {"v": 3}, {"steps": 3}], ids=lambda c: next(iter(c))
)
def test_pipeline_schedule_follows_the_degrees(change):
    base = {"n_pp": 4, "m": 8, "v": 2, "steps": 2}
    other = {**base, **change}
    drawn = bars(schematics_compute.pipeline_schedule(**other))
    assert drawn != bars(schematics_compute.pipeline_schedule(**base))
    p, m, v, k = other["n_pp"], other["m"], other["v"], other["steps"]
    # 1F1B and interleaved: a forward and a backward pass per microbatch and chunk, per step.
    assert drawn[0] == k * 2 * m * p
    assert drawn[1] == k * 2 * m * p * v
    assert drawn[2] == len(ppm.schedule_zero_bubble(p, m, k).passes)


def test_the_chapter_figure_is_the_schematic():
    fig = pipeline_page.figure_schedule(3, 6, 2, steps=2)
    assert bars(fig) == bars(schematics_compute.pipeline_schedule(3, 6, 2, steps=2))


# --- The efficiency map of the matmul chapter --------------------------------------------------
def test_efficiency_map_is_legible_in_the_column():
    panels = [sc.resolve(g) for g in ("v100", "h100")]
    fig = matmul_page.figure_efficiency_map(panels, 4, n=24)
    assert fit(fig) == []
    assert smallest_shown(fig) >= LEAST_POINTS
    labels = [t for ax in fig.axes for t in ax.texts]
    assert labels and min(t.get_fontsize() for t in labels) >= 9.5
