"""The configuration of a measured run: the cluster it ran on (GPU, fabric, the published
peak rate and power) and how it was parallelised, sharded and scheduled.

:mod:`dmlimits.measured.runs` interprets published rows into a :class:`Config`, and
:mod:`~dmlimits.measured.memory` and :mod:`~dmlimits.measured.operations` price one; this module
holds what all three share, so that none of them imports another's results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dmlimits.core import hardware
from dmlimits.measured import transformer

# --- Clusters: the GPUs and fabrics of measured runs -----------------------------------------
GB = 1e9


@dataclass(frozen=True)
class Cluster:
    name: str
    label: str
    peak_16bit: float  # FLOP/s, dense
    peak_fp8: float | None  # FLOP/s, dense; None when the GPU has no FP8 tensor cores
    derate: float  # the paper's effective utilization (clock derate) of the GPU
    hop_latency: float  # s, one step of a ring across nodes: the paper's network latency
    nvlink: float  # byte/s per GPU per direction
    nic: float  # byte/s per GPU per direction
    node_size: int
    power_w: float
    source: str
    hbm: float = 80 * 1e9  # bytes of HBM per GPU

    def peak(self, precision: str) -> float:
        if precision == "fp8":
            if self.peak_fp8 is None:
                raise ValueError(
                    f"the {self.label} has no FP8 tensor cores: expected precision bf16 or fp16 "
                    f"on {self.name}, got fp8"
                )
            return self.peak_fp8
        return self.peak_16bit


def preset_peak_flops(gpu: str) -> float:
    """Peak 16-bit FLOP/s of one GPU of the preset ``gpu``, from its hardware values as
    :attr:`dmlimits.core.scenario.Scenario.peak_flops` computes it."""
    v = hardware.gpu_values(gpu)
    return (
        v["hardware.sms"]
        * v["hardware.max_clock"]
        * v["hardware.flop_per_clock_per_thread"]
        * v["hardware.threads_per_sm"]
    )


def _hop(gpu: str) -> float:
    return float(hardware.gpu_values(gpu)["network.latency"])


def _derate(gpu: str) -> float:
    return float(hardware.gpu_values(gpu)["hardware.effective_utilization"])


CLUSTERS: dict[str, Cluster] = {
    "a100": Cluster(
        "a100",
        "A100 SXM (DGX A100, 8 x 200 Gb/s HDR a node)",
        preset_peak_flops("a100"),
        None,
        _derate("a100"),
        _hop("a100"),
        300 * GB,
        25 * GB,
        8,
        400,
        "peak: the A100 preset (NVIDIA A100 whitepaper, 312 TFLOP/s dense BF16); NVLink 3 at "
        "600 GB/s a GPU both ways; DGX A100 datasheet: 8 ConnectX-6 HDR 200 Gb/s for compute; "
        "400 W SXM4 TDP; 80 GB HBM2e (the DGX A100 640 GB's GPUs, as in Narayanan et al. 2021)",
        80 * GB,
    ),
    "h100": Cluster(
        "h100",
        "H100 SXM (8 x 400 Gb/s a node)",
        preset_peak_flops("h100"),
        2 * preset_peak_flops("h100"),
        _derate("h100"),
        _hop("h100"),
        450 * GB,
        50 * GB,
        8,
        700,
        "peak: the H100 preset (989 TFLOP/s dense BF16; FP8 twice that, H100 datasheet); "
        "NVLink 4 at 900 GB/s a GPU both ways; 400 Gb/s a GPU (Fernandez et al. 2024; the "
        "Ultra-Scale Playbook's cluster); 700 W SXM5 TDP; 80 GB HBM3",
        hardware.gpu_values("h100")["hardware.hbm_capacity"],
    ),
    "h100-500w": Cluster(
        "h100-500w",
        "H100 SXM 96 GB at 500 W (Grand Teton, 400 Gb/s a GPU)",
        preset_peak_flops("h100"),
        2 * preset_peak_flops("h100"),
        _derate("h100"),
        _hop("h100"),
        450 * GB,
        50 * GB,
        8,
        500,
        "torchtitan benchmarks/llama3_h100_202412_torchtitan.md: H100 96 GB HBM2e at 500 W, "
        "400 Gb/s RDMA a GPU; peaks as the H100's",
        96 * GB,
    ),
    "h200": Cluster(
        "h200",
        "H200 SXM (400 Gb/s ConnectX-7 a GPU)",
        preset_peak_flops("h200"),
        2 * preset_peak_flops("h200"),
        _derate("h200"),
        _hop("h200"),
        450 * GB,
        50 * GB,
        8,
        700,
        "peak: the H200 preset (the H100's compute); NVLink 900 GB/s both ways; torchtitan "
        "benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md: 400 Gb/s ConnectX-7 a GPU; "
        "700 W TDP",
        hardware.gpu_values("h200")["hardware.hbm_capacity"],
    ),
}


def _blackwell(gpu: str, label: str, power_w: float, source: str) -> Cluster:
    """A Blackwell cluster from the book's GPU preset: its peak, derate, latency, HBM, node
    size and links (the preset's bandwidths are both ways; a cluster's are one way)."""
    v = hardware.gpu_values(gpu)
    return Cluster(
        gpu, label, preset_peak_flops(gpu), 2 * preset_peak_flops(gpu), _derate(gpu), _hop(gpu),
        float(v["network.intra_node.bandwidth"]) / 2, float(v["network.inter_node.bandwidth"]) / 2,
        int(v["network.node_size"]), power_w,
        f"the {hardware.gpu_label(gpu)} preset (peak, derate, latency, HBM, links, node size; "
        f"FP8 dense twice BF16, as the datasheet); {source}",
        float(v["hardware.hbm_capacity"]),
    )  # fmt: skip


CLUSTERS["b200"] = _blackwell(
    "b200", "B200 (HGX, 8-GPU NVLink node, 400 Gb/s a GPU)", 1000,
    "NVIDIA HGX B200 specifications: up to 1,000 W a GPU",
)  # fmt: skip
CLUSTERS["gb200"] = _blackwell(
    "gb200-nvl72", "GB200 NVL72 (72-GPU NVLink domain, 400 Gb/s a GPU)", 1200,
    "NVIDIA GB200 NVL72 specifications: up to 1,200 W a GPU",
)  # fmt: skip


def cluster(name: str) -> Cluster:
    try:
        return CLUSTERS[name]
    except KeyError:
        raise ValueError(f"unknown GPU {name!r}; expected one of {', '.join(CLUSTERS)}") from None


# --- Calibration factors ---------------------------------------------------------------------
@dataclass(frozen=True)
class Factors:
    """The named efficiency factors.  ``serial_tp``: tensor-parallel collectives do not overlap
    with compute, but for a configuration whose framework overlaps them with its matmuls
    (``Config.tp_comm_overlap``).
    ``latency``: network collectives pay their latency (all-reduce fit; rings).  ``derate``: compute
    runs at the GPU's effective utilization, the paper's clock derate of long matmul runs
    (hardware presets), times ``matmul``.  ``operations``: the step's operations are timed one
    by one (:mod:`dmlimits.measured.operations`: each matmul by the matmul model, whose time
    includes the derate, divided by ``matmul``; the memory-bound operations and the optimizer
    step from HBM bandwidth) instead of as the step's FLOP at one efficiency.  ``windows``:
    each overlappable collective hides behind the compute it can run beside
    (:data:`~dmlimits.measured.runs.OVERLAP_WINDOWS`), not behind the share ``overlap`` of the
    whole step's."""

    matmul: float = 1.0
    collective: float = 1.0
    overlap: float = 1.0
    serial_tp: bool = False
    latency: bool = False
    derate: bool = False
    operations: bool = False
    windows: bool = False


#: The paper's bound (run-mfu, step 5): matmuls at the GPU's effective utilization, the clock
#: derate of long matmul runs the paper applies to every GPU, collectives at line rate with no
#: latency, every collective hidden behind compute.  It bounds what the model's data movement
#: allows; kernels below that derate, latency and communication in series are what the
#: calibrated mode adds.
BOUND = Factors(derate=True)

SHARDING = {
    "none": 0,
    "ddp": 0,
    "zero0": 0,
    "zero1": 1,
    "zero2": 2,
    "zero3": 3,
    "fsdp": 3,
    "hsdp": 3,
}
PRECISIONS = ("bf16", "fp16", "fp8")
#: Bytes of an FP8 word.
FP8_BYTES = 1.0
#: How a framework splits a pipeline's blocks and places its output layer and loss
#: (:class:`Config`'s ``stages``): ``last``, Megatron-LM's default (equal blocks a chunk, the
#: output layer and loss on the last stage); ``nanotron``, nanotron's split by compute cost;
#: ``layers``, Megatron-Core's with the embedding and the loss counted as a layer each;
#: ``layout``, an explicit layout this book does not model, counted as equal shares;
#: ``torchtitan``, torchtitan's default split points (:data:`dmlimits.measured.operations.SPLITS`).
STAGE_PLACEMENTS = ("last", "nanotron", "layers", "layout", "torchtitan")
#: The splits whose stages the calibrated mode times by laying the schedule out pass by pass
#: (:func:`dmlimits.measured.operations.pipeline_stretch`).
UNEVEN_SPLITS = ("nanotron", "layers", "torchtitan")
#: How a run's attention core can run (:class:`Config`'s ``attention_kernel``).
ATTENTION_KERNELS = ("flash", "unfused")


@dataclass(frozen=True)
class Config:
    shape: transformer.Shape
    cluster: Cluster
    n_gpus: int
    global_batch_tokens: float
    seq_len: int
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    sharding: str = "fsdp"
    shard_group: int | None = None  # HSDP: ranks in one sharding group
    mbs: int = 1  # sequences per micro-batch
    vpp: int = 1  # model chunks a GPU (interleaved 1F1B)
    precision: str = "bf16"
    recompute: str = "none"
    sequence_parallel: bool = False
    fp8_allgather: bool = False
    # Sequence parallelism keeps the all-gathered inputs of the column-parallel linears for the
    # backward pass (autograd over a gather), rather than gathering them again (Megatron-LM).
    keeps_gathered_inputs: bool = False
    # Bytes the framework holds at its peak for each byte of layer activations the count of
    # dmlimits.measured.memory finds: 1 where nothing is known (the count alone); fitted for the
    # Ultra-Scale Playbook's nanotron runs (memory.PLAYBOOK_ACTIVATION_FACTOR).
    activation_factor: float = 1.0
    # What selective recomputation keeps: "attention", Korthikanti et al.'s (only attention's
    # core is recomputed), or "op", torchtitan's per-op policy (every other matmul of a block
    # recomputed; memory.op_saved_bytes_per_token).  Only the memory count reads it.
    selective_policy: str = "attention"
    # FSDP under pipeline parallelism keeps each stage's weights gathered between its forward
    # and backward passes and accumulates its gradients unsharded over the micro-batches
    # (torchtitan: reshard_after_forward=False when pipeline parallelism is on; PyTorch's
    # pipeline stages turn FSDP's gradient reduction off but for the last micro-batch).  Only
    # the memory count reads it.
    stage_keeps_gathered: bool = False
    # How the framework splits the pipeline's blocks and where it runs the output layer and
    # loss (STAGE_PLACEMENTS).  Read by the calibrated mode's placement, operations.placement
    # ("placed", the default), and by operations.stage_times; the bound counts equal stages.
    stages: str = "last"
    # How attention's core runs (ATTENTION_KERNELS): "flash", one fused kernel that never writes
    # the scores to HBM (FlashAttention's, or kernels counted as it); "unfused", a batched
    # matmul for the scores, a softmax kernel, dropout and a second batched matmul, the scores
    # written to and read from HBM at each (Megatron-DeepSpeed's GPT model).  Read by the
    # calibrated mode (operations.parts).
    attention_kernel: str = "flash"
    # Seconds of the framework's host-side work for one block and one micro-batch, forward,
    # recomputed forward and backward together: the floor under a block's time when its kernels
    # are too small to keep the GPU busy (runs.HOST_FLOOR); 0 where not measured.
    host_floor_s: float = 0.0
    # Tensor parallelism's collectives overlapped with the matmuls they feed, each split into
    # steps (Transformer Engine's userbuffers, runs.TP_OVERLAP_FRAMEWORKS); the calibrated mode
    # then charges only what the matmuls cannot hide (runs.combine).
    tp_comm_overlap: bool = False

    def __post_init__(self) -> None:
        for name in ("n_gpus", "tp", "pp", "dp", "cp", "ep", "mbs", "vpp", "seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
        if not (
            isinstance(self.global_batch_tokens, int | float)
            and math.isfinite(self.global_batch_tokens)
            and self.global_batch_tokens > 0
        ):
            raise ValueError(
                f"global_batch_tokens must be a positive number, got {self.global_batch_tokens!r}"
            )
        if self.tp * self.pp * self.dp * self.cp != self.n_gpus:
            raise ValueError(
                f"tp x pp x dp x cp = {self.tp} x {self.pp} x {self.dp} x {self.cp} = "
                f"{self.tp * self.pp * self.dp * self.cp}, expected the GPU count {self.n_gpus}"
            )
        if self.ep != 1 and not self.shape.moe:
            raise ValueError(
                f"ep={self.ep}: expert parallelism needs a mixture-of-experts shape and "
                f"{self.shape.name} is dense; expected ep=1"
            )
        if self.shape.moe and (self.shape.experts % self.ep or (self.dp * self.cp) % self.ep):
            raise ValueError(
                f"ep={self.ep} must divide the experts ({self.shape.experts}) and the "
                f"data-parallel ranks dp x cp = {self.dp * self.cp}: expert parallelism splits "
                "the experts over ranks that hold the other weights as data parallelism does"
            )
        factor = self.activation_factor
        if isinstance(factor, bool) or not (
            isinstance(factor, int | float) and math.isfinite(factor) and factor >= 1
        ):
            raise ValueError(f"activation_factor must be a number of at least 1, got {factor!r}")
        if self.sharding not in SHARDING:
            raise ValueError(
                f"sharding must be one of {', '.join(SHARDING)}, got {self.sharding!r}"
            )
        if self.stages not in STAGE_PLACEMENTS:
            raise ValueError(
                f"stages must be one of {', '.join(STAGE_PLACEMENTS)}, got {self.stages!r}"
            )
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}"
            )
        self.cluster.peak(self.precision)  # refuses FP8 on a GPU without it
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise ValueError(
                f"attention_kernel must be one of {', '.join(ATTENTION_KERNELS)}, "
                f"got {self.attention_kernel!r}"
            )
        floor = self.host_floor_s
        if isinstance(floor, bool) or not (
            isinstance(floor, int | float) and math.isfinite(floor) and floor >= 0
        ):
            raise ValueError(f"host_floor_s must be a number of seconds >= 0, got {floor!r}")
        if self.selective_policy not in ("attention", "op"):
            raise ValueError(
                f"selective_policy must be 'attention' or 'op', got {self.selective_policy!r}"
            )
        if self.recompute not in transformer.RECOMPUTE:
            raise ValueError(
                f"recompute must be one of {', '.join(transformer.RECOMPUTE)}, "
                f"got {self.recompute!r}"
            )
        g = self.dp * self.cp
        if self.sharding == "hsdp":
            h = self.shard_group
            if h is None or h < 1 or g % h:
                raise ValueError(f"hsdp needs shard_group dividing dp x cp = {g}, got {h!r}")
        if self.micro_batches < 1:
            raise ValueError(
                f"a global batch of {self.sequences:g} sequences gives fewer than one "
                f"micro-batch of {self.mbs} per data-parallel rank (dp={self.dp}): expected "
                f"global_batch_tokens of at least {self.dp * self.mbs * self.seq_len}"
            )

    @property
    def sequences(self) -> float:
        return self.global_batch_tokens / self.seq_len

    @property
    def params_held(self) -> float:
        """The parameters one model replica's ranks hold between them: every weight, the routed
        experts' split over the expert-parallel ranks."""
        return self.shape.params - self.shape.expert_params * (1 - 1 / self.ep)

    @property
    def micro_batches(self) -> float:
        """Micro-batches per pipeline (and per data-parallel rank) per step."""
        return self.sequences / (self.dp * self.mbs)
