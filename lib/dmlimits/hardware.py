"""GPU presets: every hardware value the model uses, each with its source.

Values follow Erdil & Schneider-Joseph (2024) as reconstructed in the project's reference notes
(the authors' public code, ``gpu/gpu_model.py``), which in turn take them from NVIDIA's
architecture whitepapers.  A preset supplies the ``hardware.*`` and ``network.*`` keys of a
scenario; any of them can be overridden.
"""

from __future__ import annotations

from dataclasses import dataclass

KiB = 2**10
MiB = 2**20
GB = 1e9

PAPER = "Erdil & Schneider-Joseph (2024), model code gpu/gpu_model.py"
NV_V100 = "NVIDIA Tesla V100 GPU Architecture whitepaper (2017)"
NV_A100 = "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020)"
NV_H100 = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022)"
# The version of the authors' code that printed the paper's results and its matmul table
# (commit b1f771c, October 2024) describes the H100 by its 1980 MHz boost clock and 29.58 16-bit
# FLOP per clock per thread: 989.6 TFLOP/s, the datasheet's dense BF16 peak of 989.4 TFLOP/s.
PAPER_H100_RUN = (
    "Erdil & Schneider-Joseph (2024), gpu/gpu_model.py at commit b1f771c (the version that "
    "printed the paper's results); NVIDIA H100 Tensor Core GPU datasheet (1980 MHz boost clock, "
    "989.4 TFLOP/s dense BF16)"
)


@dataclass(frozen=True)
class Sourced:
    value: float | int | bool
    source: str


def _preset(label: str, whitepaper: str, **values: float | int | bool) -> dict:
    """Every value is taken as used by the paper's model; the whitepaper is its origin."""
    both = f"{PAPER}; {whitepaper}"
    return {
        "label": label,
        "values": {
            key: Sourced(value, both if not key.startswith("network.") else PAPER)
            for key, value in values.items()
        },
    }


GPU_PRESETS: dict[str, dict] = {
    "v100": _preset(
        "V100 SXM2",
        NV_V100,
        **{
            "hardware.sms": 80,
            "hardware.max_clock": 1533e6,
            "hardware.flop_per_clock_per_thread": 8,
            "hardware.threads_per_sm": 128,
            "hardware.effective_utilization": 0.9,
            "hardware.hbm_bandwidth": 900 * GB,
            "hardware.l2_bandwidth": 2155 * GB,
            "hardware.l2_size": 6 * MiB,
            "hardware.register_file_per_block": 64 * KiB,
            "hardware.blocks_per_sm": 4,
            "hardware.distributed_shared_memory": False,
            "hardware.hbm_capacity": 32 * GB,
            "hardware.kernel_latency": 4.5e-6,
            "network.intra_node.bandwidth": 300 * GB,
            "network.inter_node.bandwidth": 12.5 * GB,
            "network.latency": 1.125e-6,
            "network.node_size": 8,
        },
    ),
    "a100": _preset(
        "A100 SXM",
        NV_A100,
        **{
            "hardware.sms": 108,
            "hardware.max_clock": 1410e6,
            "hardware.flop_per_clock_per_thread": 16,
            "hardware.threads_per_sm": 128,
            "hardware.effective_utilization": 0.85,
            "hardware.hbm_bandwidth": 1555 * GB,
            "hardware.l2_bandwidth": 5603 * GB,
            "hardware.l2_size": 40 * MiB,
            "hardware.register_file_per_block": 64 * KiB,
            "hardware.blocks_per_sm": 4,
            "hardware.distributed_shared_memory": False,
            "hardware.hbm_capacity": 40 * GB,
            "hardware.kernel_latency": 4.5e-6,
            "network.intra_node.bandwidth": 600 * GB,
            "network.inter_node.bandwidth": 50 * GB,
            "network.latency": 1.125e-6,
            "network.node_size": 8,
        },
    ),
    "h100": _preset(
        "H100 SXM5",
        NV_H100,
        **{
            "hardware.sms": 132,
            "hardware.max_clock": 1980e6,
            "hardware.flop_per_clock_per_thread": 29.58,
            "hardware.threads_per_sm": 128,
            "hardware.effective_utilization": 0.7,
            "hardware.hbm_bandwidth": 3352 * GB,
            "hardware.l2_bandwidth": 6441 * GB,
            "hardware.l2_size": 50 * MiB,
            "hardware.register_file_per_block": 64 * KiB,
            "hardware.blocks_per_sm": 4,
            "hardware.distributed_shared_memory": True,
            "hardware.hbm_capacity": 80 * GB,
            "hardware.kernel_latency": 4.5e-6,
            "network.intra_node.bandwidth": 900 * GB,
            "network.inter_node.bandwidth": 100 * GB,
            "network.latency": 1.125e-6,
            "network.node_size": 8,
        },
    ),
}


GPU_PRESETS["h100"]["values"]["hardware.max_clock"] = Sourced(1980e6, PAPER_H100_RUN)
GPU_PRESETS["h100"]["values"]["hardware.flop_per_clock_per_thread"] = Sourced(29.58, PAPER_H100_RUN)

# Constants a preset could equally carry, with where they come from: the later version of the
# authors' code, followed by the reference notes (section 3), describes the H100 by 1830 MHz and
# 32 FLOP per clock per thread; same peak, lower shared-memory bandwidth.
ALTERNATIVES: dict[str, dict] = {
    "h100": {
        "label": "1830 MHz and 32 FLOP per clock per thread (later gpu_model.py, reference notes)",
        "sets": ("hardware.max_clock=1830e6", "hardware.flop_per_clock_per_thread=32"),
        "source": PAPER,
    }
}


def gpu_names() -> list[str]:
    return sorted(GPU_PRESETS)


def gpu_values(name: str) -> dict[str, float | int | bool]:
    """The scenario values a GPU preset supplies (``hardware.*`` and ``network.*``)."""
    return {key: s.value for key, s in GPU_PRESETS[name]["values"].items()}


def gpu_sources(name: str) -> dict[str, str]:
    return {key: s.source for key, s in GPU_PRESETS[name]["values"].items()}


def gpu_label(name: str) -> str:
    return GPU_PRESETS[name]["label"]
