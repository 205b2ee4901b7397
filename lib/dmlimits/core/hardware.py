"""GPU presets: every hardware value the model uses, each with its source.

Values follow Erdil & Schneider-Joseph (2024) as set in the authors' final code
(``gpu/gpu_model.py`` in the public repository ``ege-erdil/limits_to_distributed_training``,
commit b1f771c, October 2024), which takes most of them from NVIDIA's documents and a few from
measurements or its authors' estimates; each value below names its own source.
A preset supplies the ``hardware.*`` and ``network.*`` keys of a scenario; any of them can be
overridden.
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
# The authors' final code (commit b1f771c, October 2024) describes the H100 by its 1830 MHz
# maximum clock and 32 16-bit FLOP per clock per thread (989.6 TFLOP/s, the datasheet's dense
# BF16 peak to within 0.1 %); the book's h100 preset carries those values, as every other preset
# of the paper's GPUs carries that code's values.


@dataclass(frozen=True)
class Sourced:
    value: float | int | bool
    source: str


#: The paper's own values, which no whitepaper states: the effective utilization is the measured
#: utilization of long runs of large matmuls, the kernel latency and the word size the model's.
AUTHORS_OWN = ("hardware.effective_utilization", "hardware.kernel_latency", "model.word_bytes")


def _preset(label: str, whitepaper: str, **values: float | int | bool) -> dict:
    """Every value is taken as used by the paper's model; the whitepaper is the origin of the
    hardware's (not of the network's, nor of :data:`AUTHORS_OWN`)."""
    both = f"{PAPER}; {whitepaper}"
    return {
        "label": label,
        "values": {
            key: Sourced(value, PAPER if key.startswith("network.") or key in AUTHORS_OWN else both)
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
            "model.word_bytes": 2,
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
            "model.word_bytes": 2,
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
            "hardware.max_clock": 1830e6,
            "hardware.flop_per_clock_per_thread": 32,
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
            "model.word_bytes": 2,
            "network.intra_node.bandwidth": 900 * GB,
            "network.inter_node.bandwidth": 100 * GB,
            "network.latency": 1.125e-6,
            "network.node_size": 8,
        },
    ),
}


# --- Where the tensor cores accumulate: the book's extension for Blackwell ---------------------
# The paper's GPUs accumulate a matmul's tile in the registers of one processing block.  Blackwell
# accumulates in a tensor memory of its own, and one instruction may span a pair of SMs; the
# matmul model tiles the shared-memory boundary by the larger room (dmlimits.costs.matmul).
NV_TMEM = (
    "NVIDIA Tilus documentation (2025), Tensor Memory Tensor and Script.tcgen05: Blackwell's "
    "Tensor Memory is 128 lanes x 512 columns of 32-bit cells (256 KiB) per CTA, where the "
    "tensor cores accumulate; with cta_group=2 two CTAs (one per SM) share one tile"
)
BEFORE_BLACKWELL = (
    "the book's extension (not in the paper): no tensor memory before Blackwell; the tile "
    "accumulates in registers, one SM per tensor-core instruction"
)
#: The values that give any GPU the paper's matmul model: no tensor memory, one SM a tensor-core
#: instruction (to compare a Blackwell GPU with and without the book's extension).
PAPER_TILES: dict[str, float] = {"hardware.tensor_memory_per_sm": 0, "hardware.mma_sms": 1}
for _name in GPU_PRESETS:
    for _key, _value in PAPER_TILES.items():
        GPU_PRESETS[_name]["values"][_key] = Sourced(_value, BEFORE_BLACKWELL)

# --- Hardware beyond the paper (issue #6): each value with its own public source ------------
# Where no public figure exists the value is carried from the paper's nearest GPU or estimated,
# and its source says so; a reader can override any of them.
NV_H200 = "NVIDIA H200 Tensor Core GPU datasheet (2024): 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s"
NV_DGX_B200 = (
    "NVIDIA DGX B200 datasheet (2024): 8 GPUs, 1,440 GB HBM3e, 64 TB/s HBM bandwidth, "
    "72 PFLOPS FP8 training (36 PFLOPS dense BF16), NVLink 5 at 1.8 TB/s per GPU, "
    "8 x ConnectX-7 400 Gb/s"
)
NV_GB200 = (
    "NVIDIA GB200 NVL72 datasheet (2024): 72 GPUs in one NVLink domain, 130 TB/s NVLink, "
    "180 PFLOPS dense BF16 (360 sparse), 13.4 TB HBM3e at 576 TB/s"
)
NV_GTX580 = (
    "NVIDIA GeForce GTX 580 specifications (2010): 512 CUDA cores at 1544 MHz, 192.4 GB/s; "
    "NVIDIA Fermi compute architecture whitepaper (2009): 16 SMs of 32 cores, 768 KB L2, "
    "32K 32-bit registers per SM, one fused multiply-add per core per clock"
)
ALEXNET = (
    "Krizhevsky, Sutskever & Hinton (2012): AlexNet trained on two GTX 580 3 GB GPUs in one machine"
)
BLACKWELL_SM = (
    "148 SMs at a 1965 MHz boost clock as reported for the B200 (not in NVIDIA's datasheet); "
    "the FLOP per clock per thread is chosen so that the peak is the datasheet's dense BF16"
)
CARRIED_H100 = "carried from the paper's H100 (same or similar design; no public figure)"
ESTIMATE = "estimate, no public figure"


def _sourced(label: str, values: dict[str, tuple[float | int | bool, str]]) -> dict:
    return {"label": label, "values": {k: Sourced(v, src) for k, (v, src) in values.items()}}


def _h100_carried(keys: tuple[str, ...]) -> dict[str, tuple[float | int | bool, str]]:
    h100 = GPU_PRESETS["h100"]["values"]
    return {k: (h100[k].value, f"{CARRIED_H100}: {h100[k].source}") for k in keys}


def _paper(gpu: str, key: str) -> float:
    """A value of one of the paper's GPUs, for the estimates that borrow it."""
    return GPU_PRESETS[gpu]["values"][key].value


_BLACKWELL_PEAK_CLOCK = 1965e6
_BLACKWELL_SMS = 148


def _per_clock(peak: float, sms: int, clock: float, threads: int = 128) -> float:
    return peak / (threads * sms * clock)


_H200_AS_H100 = (
    "hardware.sms", "hardware.max_clock", "hardware.flop_per_clock_per_thread",
    "hardware.threads_per_sm", "hardware.effective_utilization", "hardware.l2_bandwidth",
    "hardware.l2_size", "hardware.register_file_per_block", "hardware.blocks_per_sm",
    "hardware.distributed_shared_memory", "hardware.kernel_latency", "network.latency",
    "network.node_size", "network.inter_node.bandwidth",
)  # fmt: skip
_B200_AS_H100 = (
    "hardware.threads_per_sm", "hardware.effective_utilization",
    "hardware.register_file_per_block", "hardware.blocks_per_sm",
    "hardware.distributed_shared_memory", "hardware.kernel_latency", "network.latency",
)  # fmt: skip
GPU_PRESETS["h200"] = _sourced(
    "H200 SXM",
    {
        **_h100_carried(_H200_AS_H100),
        "hardware.hbm_bandwidth": (4800 * GB, NV_H200),
        "hardware.hbm_capacity": (141 * GB, NV_H200),
        "hardware.tensor_memory_per_sm": (0, f"{BEFORE_BLACKWELL} (the H200 is a Hopper GPU)"),
        "hardware.mma_sms": (1, f"{BEFORE_BLACKWELL} (the H200 is a Hopper GPU)"),
        "model.word_bytes": (2, f"{NV_H200}: 16-bit (BF16) arithmetic"),
        "network.intra_node.bandwidth": (900 * GB, NV_H200),
    },
)
_B200 = {
    **_h100_carried(_B200_AS_H100),
    "hardware.sms": (_BLACKWELL_SMS, BLACKWELL_SM),
    "hardware.max_clock": (_BLACKWELL_PEAK_CLOCK, BLACKWELL_SM),
    "hardware.flop_per_clock_per_thread": (
        _per_clock(2.25e15, _BLACKWELL_SMS, _BLACKWELL_PEAK_CLOCK),
        f"{BLACKWELL_SM}; {NV_DGX_B200}",
    ),
    "hardware.hbm_bandwidth": (8000 * GB, NV_DGX_B200),
    "hardware.hbm_capacity": (180 * GB, NV_DGX_B200),
    "hardware.tensor_memory_per_sm": (128 * 512 * 4, NV_TMEM),
    "hardware.mma_sms": (2, NV_TMEM),
    "model.word_bytes": (2, f"{NV_DGX_B200}: 16-bit (BF16) arithmetic, the dense BF16 peak"),
    "hardware.l2_size": (
        2 * _paper("h100", "hardware.l2_size"),
        f"{ESTIMATE}: two dies of the H100's L2",
    ),
    "hardware.l2_bandwidth": (
        2 * _paper("h100", "hardware.l2_bandwidth"),
        f"{ESTIMATE}: two dies of the H100's L2 bandwidth",
    ),
    "network.intra_node.bandwidth": (1800 * GB, NV_DGX_B200),
    "network.inter_node.bandwidth": (100 * GB, f"{NV_DGX_B200} (400 Gb/s each way)"),
    "network.node_size": (8, NV_DGX_B200),
}
GPU_PRESETS["b200"] = _sourced("B200 (HGX, 8-GPU NVLink node)", _B200)
GPU_PRESETS["gb200-nvl72"] = _sourced(
    "GB200 NVL72 (72-GPU NVLink domain)",
    {
        **_B200,
        "hardware.flop_per_clock_per_thread": (
            _per_clock(2.5e15, _BLACKWELL_SMS, _BLACKWELL_PEAK_CLOCK),
            f"{BLACKWELL_SM}; {NV_GB200}",
        ),
        "hardware.hbm_bandwidth": (8000 * GB, NV_GB200),
        "hardware.hbm_capacity": (186 * GB, NV_GB200),
        "network.intra_node.bandwidth": (1800 * GB, NV_GB200),
        "network.inter_node.bandwidth": (
            100 * GB,
            f"{ESTIMATE}: one 400 Gb/s InfiniBand port per GPU, as in the HGX B200",
        ),
        "network.node_size": (72, NV_GB200),
    },
)
GPU_PRESETS["gtx580"] = _sourced(
    "GeForce GTX 580 (2010)",
    {
        "hardware.sms": (16, NV_GTX580),
        "hardware.max_clock": (1544e6, NV_GTX580),
        # Two FLOP per clock per core (a fused multiply-add), 32 cores per SM, 32-bit only.
        "hardware.flop_per_clock_per_thread": (2, NV_GTX580),
        "hardware.threads_per_sm": (32, NV_GTX580),
        "hardware.effective_utilization": (
            _paper("v100", "hardware.effective_utilization"),
            f"{ESTIMATE}: the paper's derate of the V100, the oldest GPU it models",
        ),
        "hardware.hbm_bandwidth": (192.4 * GB, NV_GTX580),
        "hardware.l2_bandwidth": (
            192.4
            * GB
            * _paper("v100", "hardware.l2_bandwidth")
            / _paper("v100", "hardware.hbm_bandwidth"),
            f"{ESTIMATE}: the V100's ratio of L2 to DRAM bandwidth",
        ),
        "hardware.l2_size": (768 * KiB, NV_GTX580),
        "hardware.register_file_per_block": (64 * KiB, f"{NV_GTX580} (two schedulers per SM)"),
        "hardware.blocks_per_sm": (2, NV_GTX580),
        "hardware.distributed_shared_memory": (False, NV_GTX580),
        "hardware.tensor_memory_per_sm": (0, f"{NV_GTX580} (no tensor cores)"),
        "hardware.mma_sms": (1, f"{NV_GTX580} (no tensor cores)"),
        "hardware.hbm_capacity": (3 * GB, ALEXNET),
        # Fermi has no 16-bit arithmetic: its words, and the FLOP its peak counts, are 32-bit.
        "model.word_bytes": (4, f"{NV_GTX580} (32-bit arithmetic only)"),
        "hardware.kernel_latency": (
            _paper("h100", "hardware.kernel_latency"),
            f"{ESTIMATE}: the paper's kernel latency",
        ),
        "network.intra_node.bandwidth": (
            16 * GB,
            f"{ALEXNET}; PCIe 2.0 x16 between them, 8 GB/s each way",
        ),
        "network.inter_node.bandwidth": (
            5 * GB,
            f"{ESTIMATE}: 2012 InfiniBand QDR, 40 Gb/s per machine of two GPUs",
        ),
        "network.latency": (
            _paper("h100", "network.latency"),
            f"{ESTIMATE}: the paper's network latency",
        ),
        "network.node_size": (2, ALEXNET),
    },
)
#: The GPUs of the first paper (its chapters compare these three).
PAPER_GPUS = ("v100", "a100", "h100")


def gpu_names() -> list[str]:
    return sorted(GPU_PRESETS)


def gpu_values(name: str) -> dict[str, float | int | bool]:
    """The scenario values a GPU preset supplies: ``hardware.*``, ``network.*`` and the word
    size of its arithmetic, ``model.word_bytes``."""
    return {key: s.value for key, s in GPU_PRESETS[name]["values"].items()}


def gpu_sources(name: str) -> dict[str, str]:
    return {key: s.source for key, s in GPU_PRESETS[name]["values"].items()}


def gpu_label(name: str) -> str:
    return GPU_PRESETS[name]["label"]
