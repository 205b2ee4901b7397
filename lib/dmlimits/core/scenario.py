"""Scenarios: every assumption of a build, validated before anything runs.

A scenario is a flat mapping of dotted keys (``network.inter_node.bandwidth``) to values.  It is
made, in this order, from

1. the defaults of :data:`SCHEMA`,
2. the GPU preset named by ``gpu`` (its ``hardware.*`` and ``network.*`` values),
3. a named preset (``lib/dmlimits/scenarios/NAME.yaml``) or a YAML file of the reader's, which may
   carry ``name``, ``description``, any keys, and ``scale`` (multipliers applied to values of the
   GPU preset, e.g. latencies divided by ten),
4. ``--set key=value`` overrides, in the order given.

Every value is checked against the schema: unknown keys, wrong types, zero, negative or
non-finite sizes, bandwidths, latencies and durations are refused with a
:class:`ScenarioError` whose one-line message names the key, the value given and what was
expected.
"""

from __future__ import annotations

import difflib
import math
import threading
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dmlimits.core import hardware

DEFAULT_SCENARIO = "h100"
SECONDS_PER_YEAR = 365.25 * 86400


class ScenarioError(ValueError):
    """A scenario value, key, file or preset name is not acceptable.  The message is one line."""


@dataclass(frozen=True)
class Field:
    kind: str  # "float", "int", "bool", "choice"
    default: Any
    doc: str
    unit: str = ""
    choices: tuple[str, ...] = ()
    minimum: float = 0.0
    inclusive_minimum: bool = False  # False: value must exceed the minimum
    maximum: float | None = None

    def expected(self) -> str:
        if self.kind == "bool":
            return "true or false"
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        what = "a whole number" if self.kind == "int" else "a finite number"
        if self.inclusive_minimum:
            bound = f"at least {self.minimum:g}"
        else:
            bound = "greater than zero" if self.minimum == 0 else f"greater than {self.minimum:g}"
        if self.maximum is not None:
            bound += f" and at most {self.maximum:g}"
        unit = f" ({self.unit})" if self.unit else ""
        return f"{what} {bound}{unit}"


def _pos(default: float, doc: str, unit: str = "", **kw: Any) -> Field:
    return Field("float", default, doc, unit, **kw)


def _int(default: int, doc: str, unit: str = "", **kw: Any) -> Field:
    return Field("int", default, doc, unit, **kw)


_H100 = hardware.gpu_values("h100")

#: Every key a scenario may set: its default, unit, check and source.
SCHEMA: dict[str, Field] = {
    "gpu": Field(
        "choice",
        "h100",
        "GPU preset supplying the hardware.* and network.* values",
        choices=tuple(hardware.gpu_names()),
    ),
    # hardware.*: one GPU
    "hardware.sms": _int(_H100["hardware.sms"], "streaming multiprocessors"),
    "hardware.max_clock": _pos(_H100["hardware.max_clock"], "maximum clock", "Hz"),
    "hardware.flop_per_clock_per_thread": _pos(
        _H100["hardware.flop_per_clock_per_thread"],
        "FLOP per clock per thread, at the word size of model.word_bytes (16-bit on the paper's "
        "GPUs)",
    ),
    "hardware.threads_per_sm": _int(_H100["hardware.threads_per_sm"], "threads per SM"),
    "hardware.effective_utilization": _pos(
        _H100["hardware.effective_utilization"],
        "measured utilization of long runs of large matmuls (clock derate)",
        maximum=1.0,
    ),
    "hardware.hbm_bandwidth": _pos(_H100["hardware.hbm_bandwidth"], "HBM bandwidth", "byte/s"),
    "hardware.l2_bandwidth": _pos(_H100["hardware.l2_bandwidth"], "L2 bandwidth", "byte/s"),
    "hardware.l2_size": _pos(_H100["hardware.l2_size"], "L2 capacity", "byte"),
    "hardware.register_file_per_block": _pos(
        _H100["hardware.register_file_per_block"], "register file per processing block", "byte"
    ),
    "hardware.blocks_per_sm": _int(_H100["hardware.blocks_per_sm"], "processing blocks per SM"),
    "hardware.tensor_memory_per_sm": _pos(
        _H100["hardware.tensor_memory_per_sm"],
        "tensor memory per SM, where Blackwell's tensor cores accumulate (0: none, before "
        "Blackwell)",
        "byte",
        inclusive_minimum=True,
    ),
    "hardware.mma_sms": _int(
        _H100["hardware.mma_sms"], "SMs one tensor-core instruction's tile spans (2 on Blackwell)"
    ),
    "hardware.distributed_shared_memory": Field(
        "bool",
        _H100["hardware.distributed_shared_memory"],
        "distributed shared memory multicast (Hopper)",
    ),
    "hardware.hbm_capacity": _pos(_H100["hardware.hbm_capacity"], "HBM capacity", "byte"),
    "hardware.kernel_latency": _pos(
        _H100["hardware.kernel_latency"], "fixed latency of one matmul kernel", "s"
    ),
    # network.*: the two-level cluster network
    "network.topology": Field(
        "choice",
        "two-level",
        "two-level (NVLink nodes joined by InfiniBand), flat (one NVLink level for all GPUs) or "
        "unlimited (no bandwidth limit; latency still paid)",
        choices=("two-level", "flat", "unlimited"),
    ),
    "network.intra_node.bandwidth": _pos(
        _H100["network.intra_node.bandwidth"], "NVLink bandwidth per GPU, bidirectional", "byte/s"
    ),
    "network.inter_node.bandwidth": _pos(
        _H100["network.inter_node.bandwidth"],
        "InfiniBand bandwidth per GPU, bidirectional",
        "byte/s",
    ),
    "network.latency": _pos(_H100["network.latency"], "latency per message, each level", "s"),
    "network.node_size": _int(_H100["network.node_size"], "GPUs per NVLink node"),
    # training.*
    "training.months": _pos(3.0, "wall-clock duration of the training run", "months"),
    "training.tokens_per_param": _pos(20.0, "training tokens per parameter (Chinchilla)"),
    "training.year_seconds": _pos(
        SECONDS_PER_YEAR,
        "seconds in a year, to turn months into seconds: 365.25 days (the authors' closed-form "
        "notebook); the authors' search notebook uses 3.154e7",
        "s",
    ),
    # model.*
    "model.sparse": Field("bool", False, "mixture of experts (sparsity law) instead of dense"),
    "model.ff_ratio": _pos(4.0, "d_ff / d_model"),
    "model.sequence_length": _int(2048, "tokens per sequence", "tokens"),
    "model.word_bytes": _pos(
        2.0,
        "bytes per word of weights, activations and gradients: 16-bit arithmetic (2); a GPU "
        "preset without 16-bit arithmetic sets its own",
        "byte",
    ),
    # depth.*: L = coefficient * (d_model d_ff)^exponent
    "depth.coefficient": _pos(0.10056, "coefficient of the depth law"),
    "depth.exponent": _pos(0.3751, "exponent of the depth law", maximum=10.0),
    # sparsity.*: S = experts * sqrt(d_model d_ff / (ff_ratio * reference_d_model^2))
    "sparsity.reference_experts": _pos(8.0, "experts at the reference width"),
    "sparsity.reference_d_model": _pos(12288.0, "reference width of the sparsity law"),
    # batch.*
    "batch.law": Field(
        "choice", "default", "batch-size law", choices=("default", "none", "deepseek")
    ),
    "batch.anchor_tokens": _pos(
        4.0 * 2**20,
        "batch at the anchor compute (default law) and fixed batch (no scaling)",
        "tokens",
    ),
    "batch.anchor_flop": _pos(3e23, "anchor compute of the default batch law", "FLOP"),
    "batch.exponent": _pos(
        1 / 6, "exponent of the default batch law", minimum=0.0, inclusive_minimum=True, maximum=1.0
    ),
    "batch.deepseek_coefficient": _pos(0.2920, "coefficient of the DeepSeek batch law"),
    "batch.deepseek_exponent": _pos(0.3271, "exponent of the DeepSeek batch law", maximum=1.0),
    # search.*: choices the search makes where the paper's description leaves room
    "search.level_times": Field(
        "choice",
        "links",
        "how bandwidth times on the two network levels combine (chapter 'The best parallelism at "
        "every scale'): links (NVLink and InfiniBand work at once, each carrying the sum of "
        "every transfer on its level; derived there), authors (each all-reduce family's levels "
        "overlap, point-to-point levels add, and the families add: the authors' final code), "
        "max (each parallelism's two levels overlap, parallelisms add) or sum (everything adds)",
        choices=("links", "authors", "max", "sum"),
    ),
    "search.latency_paid": Field(
        "choice",
        "step",
        "how often a step pays the latency of its tensor-parallel and pipeline messages "
        "(chapter 'The best parallelism at every scale'): step (once, along one microbatch's "
        "chain through the layers; the paper and the authors' final code) or microbatch (once "
        "for every microbatch of the pipeline: an upper bound that the schedule simulation of "
        "the pipeline chapter brackets)",
        choices=("step", "microbatch"),
    ),
    "search.dp_overlap": Field(
        "bool",
        False,
        "the gradient all-reduce overlaps the pipeline's compute (false: it follows the pipeline, "
        "as the paper and the authors' final code have it)",
    ),
    "search.microbatch_unit": Field(
        "choice",
        "token",
        "what microbatches are whole numbers of (chapter 'Pipeline parallelism'): token (the "
        "model has no attention, so any tokens can form a microbatch; the authors' final code) "
        "or sequence",
        choices=("token", "sequence"),
    ),
    "search.microbatch_candidates": _int(
        4,
        "how many of the smallest valid microbatch counts 1F1B tries (the paper's four; with "
        "one the H100 results are the same)",
        maximum=64,
    ),
    "search.zero_bubble": Field("bool", True, "try zero-bubble pipelining (Qi et al. 2024)"),
    "search.zero_bubble_min": Field(
        "choice",
        "2n",
        "fewest microbatches a zero-bubble schedule needs (chapter 'Pipeline parallelism'): 2n "
        "(two per stage, which hides the pipeline's latency; the authors' final code) or 2n-1 "
        "(the fewest the ZB-H2 schedule itself runs with; earlier versions of the authors' code)",
        choices=("2n", "2n-1"),
    ),
    "search.expert_latency": Field(
        "choice",
        "highest",
        "expert latency per interface (chapter 'Expert parallelism'): highest (every interface "
        "waits for the highest level the expert group spans; the authors' final code) or "
        "expected (the levels' latencies weighted by how often a token crosses each; earlier "
        "versions of the authors' code)",
        choices=("highest", "expected"),
    ),
    "search.tp_split_rule": Field(
        "choice",
        "isqrt",
        "2D split rule of tensor parallelism (chapter 'Tensor parallelism'): isqrt "
        "(floor(sqrt(N_TP)) <= N_TP,ff <= 4 floor(sqrt(N_TP)); the authors' final code) or exact "
        "(sqrt(N_TP) <= N_TP,ff <= 4 sqrt(N_TP), the rule without rounding)",
        choices=("isqrt", "exact"),
    ),
    # closed_forms.*: the power laws of the closed forms (Erdil & Schneider-Joseph 2024; the
    # authors' final code, layer_and_batch_scaling.ipynb in the public repository
    # ege-erdil/limits_to_distributed_training, commit b1f771c, October 2024)
    "closed_forms.batch_tokens": _pos(
        4e6, "batch at the anchor compute in the closed forms (the authors' notebook)", "tokens"
    ),
    "closed_forms.layers": _pos(100.0, "layers at the anchor compute in the closed forms"),
    "closed_forms.alpha": _pos(
        0.0,
        "exponent of the batch-to-depth ratio B / L against compute in the closed forms",
        minimum=-0.45,
        inclusive_minimum=True,
        maximum=0.45,
    ),
    # sweep.*: the grid of model widths
    "sweep.d_model_min": _pos(12288.0, "smallest model width of the sweep"),
    "sweep.d_model_max_factor": _pos(
        128.0, "largest width as a multiple of the smallest", minimum=1.0, inclusive_minimum=True
    ),
}

META_KEYS = ("name", "description", "scale")


def _suggest(key: str, options: list[str]) -> str:
    close = difflib.get_close_matches(key, options, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def coerce(key: str, value: Any) -> Any:
    """Check one value against the schema; return it in its canonical Python type."""
    if key not in SCHEMA:
        raise ScenarioError(
            f"{key}: unknown key{_suggest(key, list(SCHEMA))}; run "
            "'python -m dmlimits scenarios --keys' for the list"
        )
    f = SCHEMA[key]
    bad = ScenarioError(f"{key}: got {value!r}; expected {f.expected()}")
    if f.kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no"):
            return value.lower() in ("true", "yes")
        raise bad
    if f.kind == "choice":
        if isinstance(value, str) and value in f.choices:
            return value
        hint = _suggest(str(value), list(f.choices))
        raise ScenarioError(f"{key}: got {value!r}; expected {f.expected()}{hint}")
    if isinstance(value, bool):
        raise bad
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise bad from None
    if not isinstance(value, int | float):
        raise bad
    if not math.isfinite(value):
        raise bad
    if f.kind == "int":
        if isinstance(value, float):
            if not value.is_integer():
                raise bad
            value = int(value)
    else:
        value = float(value)
    too_small = value < f.minimum if f.inclusive_minimum else value <= f.minimum
    if too_small or (f.maximum is not None and value > f.maximum):
        raise bad
    return value


def _flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and key not in META_KEYS and key not in SCHEMA:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def preset_dir() -> Path:
    return Path(str(resources.files("dmlimits") / "scenarios"))


#: The presets of the first paper, in the order its figures compare them (issue #4 names them).
PAPER_PRESETS = (
    "h100", "h100-no-batch-scaling", "h100-deepseek-batch", "v100", "a100", "h100-sparse",
    "v100-sparse", "a100-sparse", "h100-low-latency", "h100-global-nvlink",
    "h100-global-nvlink-low-latency", "h100-infinite-network-low-latency",
    "h100-low-latency-sparse", "h100-global-nvlink-sparse",
    "h100-global-nvlink-low-latency-sparse", "h100-infinite-network-low-latency-sparse",
)  # fmt: skip


def preset_names() -> list[str]:
    return sorted(p.stem for p in preset_dir().glob("*.yaml"))


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ScenarioError(f"no such file: {path}") from None
    except OSError as exc:
        raise ScenarioError(f"scenario file {str(path)!r} cannot be read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ScenarioError(
            f"scenario file {str(path)!r} does not parse{where}: {problem}"
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(
            f"scenario file {str(path)!r}: expected a mapping of keys to values, "
            f"got {type(data).__name__}"
        )
    return _flatten(data)


def parse_set(item: str) -> tuple[str, Any]:
    """``key=value`` to a key and a YAML-parsed value (still unvalidated)."""
    if "=" not in item:
        raise ScenarioError(f"--set {item!r}: expected key=value, e.g. training.months=6")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ScenarioError(f"--set {item!r}: the key before '=' is empty")
    try:
        value = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        value = raw
    if isinstance(value, dict | list):
        value = raw
    return key, value


#: Called with every scenario made, unless :func:`unwatched` is in force: the build registers
#: here what lists the assumptions a chapter reads (:mod:`dmlimits.build.reads`).
CREATION_HOOKS: list[Callable[[Scenario], None]] = []
_UNWATCHED = threading.local()


@contextmanager
def unwatched():
    """Scenarios resolved inside are not passed to the :data:`CREATION_HOOKS`: for a preset the
    library reads as published (the GPU a measured run ran on), which no reader's assumption
    changes.  Never for a scenario made from the one a chapter was given."""
    before = getattr(_UNWATCHED, "on", False)
    _UNWATCHED.on = True
    try:
        yield
    finally:
        _UNWATCHED.on = before


@dataclass(frozen=True)
class Scenario:
    """A validated set of assumptions.  Index it with dotted keys: ``scn["training.months"]``."""

    name: str
    values: dict[str, Any]
    description: str = ""
    origin: str = ""  # the preset or file it came from
    overrides: tuple[tuple[str, Any], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if CREATION_HOOKS and not getattr(_UNWATCHED, "on", False):
            for hook in CREATION_HOOKS:
                hook(self)

    def __getitem__(self, key: str) -> Any:
        if key not in self.values:
            raise KeyError(f"{key}: unknown key{_suggest(key, list(self.values))}")
        return self.values[key]

    # Quantities every chapter needs, derived from the values in one place.
    @property
    def peak_flops(self) -> float:
        """Peak 16-bit FLOP/s of one GPU: FLOP per clock per thread x threads x SMs x clock."""
        v = self.values
        return (
            v["hardware.flop_per_clock_per_thread"]
            * v["hardware.threads_per_sm"]
            * v["hardware.sms"]
            * v["hardware.max_clock"]
        )

    @property
    def train_seconds(self) -> float:
        return self.values["training.months"] / 12 * self.values["training.year_seconds"]

    @property
    def gpu_label(self) -> str:
        return hardware.gpu_label(self.values["gpu"])

    @property
    def slug(self) -> str:
        """A folder-safe name for this scenario's build."""
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in self.name)
        return safe.strip("-") or "scenario"

    def differences(self, other: Scenario) -> dict[str, tuple[Any, Any]]:
        """Keys whose values differ: key -> (other's value, this value)."""
        return {
            k: (other.values.get(k), v) for k, v in self.values.items() if other.values.get(k) != v
        }

    def to_yaml(self) -> str:
        data = {"name": self.name, "description": self.description, **self.values}
        return yaml.safe_dump(data, sort_keys=False)


def _load_base(spec: str) -> tuple[dict[str, Any], str]:
    """A preset name or a YAML path to its flat mapping and its origin."""
    if spec in preset_names():
        return _read_yaml(preset_dir() / f"{spec}.yaml"), f"preset {spec}"
    looks_like_path = spec.endswith((".yaml", ".yml")) or "/" in spec or Path(spec).exists()
    if looks_like_path:
        return _read_yaml(Path(spec)), str(spec)
    raise ScenarioError(
        f"scenario {spec!r}: not a preset name or a YAML file; presets are "
        f"{', '.join(preset_names())}{_suggest(spec, preset_names())}"
    )


def resolve(
    spec: str | None = None,
    sets: list[str] | tuple[str, ...] = (),
    name: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> Scenario:
    """Build and validate a scenario from a preset name or YAML path plus ``key=value`` sets
    (strings, as on the command line) and ``overrides`` (a mapping, as notebooks receive)."""
    spec = spec or DEFAULT_SCENARIO
    base, origin = _load_base(spec)
    parsed_sets = [parse_set(s) for s in sets] + list((overrides or {}).items())

    meta_name = base.pop("name", None)
    description = base.pop("description", "") or ""
    scale = base.pop("scale", None) or {}
    if not isinstance(scale, dict):
        raise ScenarioError(
            f"{origin}: scale: expected a mapping of keys to multipliers, got {scale!r}"
        )
    scale = _flatten(scale)

    # Validate every key and value before combining, in the order a reader would fix them.
    file_values = {k: coerce(k, v) for k, v in base.items()}
    set_values = [(k, coerce(k, v)) for k, v in parsed_sets]
    for k, factor in scale.items():
        coerce(k, SCHEMA[k].default if k in SCHEMA else factor)  # the key must exist
        if SCHEMA[k].kind not in ("float", "int"):
            raise ScenarioError(f"scale: {k} is not a number and cannot be scaled")
        if (
            isinstance(factor, bool)
            or not isinstance(factor, int | float)
            or not (math.isfinite(factor) and factor > 0)
        ):
            raise ScenarioError(
                f"scale: {k}: got {factor!r}; expected a finite multiplier greater than zero"
            )

    gpu = dict(set_values).get("gpu", file_values.get("gpu", SCHEMA["gpu"].default))
    values = {k: f.default for k, f in SCHEMA.items()}
    values["gpu"] = gpu
    values.update({k: coerce(k, v) for k, v in hardware.gpu_values(gpu).items()})
    for k, factor in scale.items():
        values[k] = coerce(k, values[k] * factor)
    values.update(file_values)
    for k, v in set_values:
        values[k] = v

    scenario_name = name or meta_name or (spec if origin.startswith("preset") else Path(spec).stem)
    if not isinstance(scenario_name, str) or not scenario_name.strip():
        raise ScenarioError(f"{origin}: name: got {scenario_name!r}; expected a non-empty string")
    if set_values and not name:
        scenario_name += "+" + "+".join(f"{k}={v}" for k, v in set_values)
    scn = Scenario(
        name=scenario_name,
        values=values,
        description=str(description),
        origin=origin,
        overrides=tuple(set_values),
    )
    if not name:
        # A name made from the preset's or file's name and the overrides, not given: reading it
        # reads what it was made from (:mod:`dmlimits.build.reads` lists every value for it).
        object.__setattr__(scn, "name_was_made", True)
    return scn


def resolve_overrides(
    scn: Scenario, overrides: dict[str, Any], name: str | None = None
) -> Scenario:
    """``scn`` with ``overrides`` (dotted key -> value) applied and validated like ``--set``:
    what-if variants of a scenario that was itself built from a preset or a file."""
    values = dict(scn.values)
    for key, value in overrides.items():
        values[key] = coerce(key, value)
    return Scenario(
        name=name or scn.name + "+" + "+".join(f"{k}={v}" for k, v in overrides.items()),
        values=values,
        description=scn.description,
        origin=scn.origin,
        overrides=scn.overrides + tuple((k, values[k]) for k in overrides),
    )


def compared(names: Sequence[str], scn: Scenario) -> dict[str, Scenario]:
    """The presets ``names`` for a comparison, each carrying the assumptions of ``scn`` that
    the comparison is not about.

    The comparison varies every key on which one of the presets differs from the default
    scenario; those keys keep each preset's own values, so every curve keeps the GPU, network
    or batch law it is named after.  Every other value of ``scn`` (a longer run, another batch
    anchor, a steeper depth law) is carried to every preset.  When the presets vary the GPU,
    the values ``scn`` has only because of its GPU are the GPU's, not the reader's, and are
    not carried either: a book built for A100s compares the same generations as the default
    book, each with the reader's other assumptions.
    """
    if not isinstance(scn, Scenario):
        raise TypeError(f"scn: got {type(scn).__name__}; expected a Scenario (scenario.resolve)")
    presets = {name: resolve(name) for name in names}
    default_scn = resolve(DEFAULT_SCENARIO)
    varied: set[str] = set()
    for preset in presets.values():
        varied |= set(preset.differences(default_scn))
    baseline = default_scn
    if "gpu" in varied:
        baseline = resolve(DEFAULT_SCENARIO, [f"gpu={scn['gpu']}"])
    carried = {k: v for k, (_, v) in scn.differences(baseline).items() if k not in varied}
    if not carried:
        return presets
    return {name: resolve_overrides(preset, carried, name=name) for name, preset in presets.items()}


def default() -> Scenario:
    return resolve(DEFAULT_SCENARIO)


def describe_presets() -> list[tuple[str, str]]:
    """(name, one-line description) for every preset."""
    out = []
    for name in preset_names():
        data = _read_yaml(preset_dir() / f"{name}.yaml")
        out.append(
            (
                name,
                str(data.get("description", "")).strip().splitlines()[0]
                if data.get("description")
                else "",
            )
        )
    return out

