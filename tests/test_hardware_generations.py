"""Hardware beyond the paper: H200, B200, GB200 NVL72 and the GTX 580, each value sourced."""

from __future__ import annotations

import pytest
from dmlimits import search
from dmlimits.core import hardware
from dmlimits.core import scenario as sc

NEW = ("h200", "b200", "gb200-nvl72", "gtx580")


@pytest.mark.parametrize("gpu", NEW)
def test_every_value_has_a_source_and_every_key_is_set(gpu):
    assert set(hardware.gpu_values(gpu)) == set(hardware.gpu_values("h100"))
    for key, source in hardware.gpu_sources(gpu).items():
        assert len(source) > 20, (gpu, key)


@pytest.mark.parametrize("gpu", ("v100", "a100", "h100"))
def test_the_papers_own_values_are_not_credited_to_a_whitepaper(gpu):
    """The effective utilization (a measured derate) and the kernel latency are the authors';
    the hardware's counts and bandwidths come from NVIDIA's whitepapers through their code."""
    sources = hardware.gpu_sources(gpu)
    for key in hardware.AUTHORS_OWN:
        assert sources[key] == hardware.PAPER, (gpu, key)
    assert "whitepaper" in sources["hardware.sms"]


@pytest.mark.parametrize(
    ("gpu", "peak"),
    [("h200", 989.4e12), ("b200", 2.25e15), ("gb200-nvl72", 2.5e15), ("gtx580", 1.581e12)],
)
def test_peaks_are_the_datasheets(gpu, peak):
    assert sc.resolve(gpu).peak_flops == pytest.approx(peak, rel=2e-3)


def test_h200_is_the_h100_with_more_memory():
    h100, h200 = hardware.gpu_values("h100"), hardware.gpu_values("h200")
    differ = {k for k in h100 if h100[k] != h200[k]}
    assert differ == {"hardware.hbm_bandwidth", "hardware.hbm_capacity"}


def test_gtx580_runs_in_32_bit():
    assert sc.resolve("gtx580")["model.word_bytes"] == 4


@pytest.mark.parametrize(
    ("node", "n_gpu", "used"),
    [(8, 4, 4), (8, 64, 8), (72, 64, 64), (72, 128, 64), (72, 144, 72), (72, 2**20, 64), (2, 8, 2)],
)
def test_used_node(node, n_gpu, used):
    assert search.used_node(node, n_gpu) == used


def test_gb200_nvl72_sweeps_on_power_of_two_clusters():
    """Clusters of 2^i GPUs on 72-GPU racks use 64 GPUs of each rack's NVLink domain."""
    rows = [r for r in search.rows(sc.resolve("gb200-nvl72")) if r["feasible"]]
    assert len(rows) > 20
    assert all(r["n_gpu"] & (r["n_gpu"] - 1) == 0 for r in rows)
