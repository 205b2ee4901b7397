"""A row means what it says (issue #55, item 1): the shape columns a published row states
(layers, d_model, heads, KV heads, FFN width, vocabulary) override the preset its model's name
matches, and its sequence length is the one timed; a model truncated to fewer layers is timed and
sized with its own layer count, its embedding and output layer kept."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest
from dmlimits.measured import runs, transformer

#: A torchtitan Llama 3.1 70B row of the development file, the template every test changes.
BASE = next(
    r for r in runs.dev_rows() if r["model"] == "Llama 3.1 70B" and r["framework"] == "torchtitan"
)
PRESET = transformer.SHAPES["llama3-70b"]


def row(**changes) -> dict:
    return {**BASE, **{k: str(v) for k, v in changes.items()}}


def test_the_template_is_the_preset():
    assert runs.row_shape(row(), []) == PRESET


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("layers", 12),
        ("d_model", 4096),
        ("heads", 32),
        ("kv_heads", 4),
        ("d_ff", 14336),
        ("vocab", 32000),
    ],
)
def test_a_stated_shape_column_overrides_the_preset(column, value):
    assert getattr(PRESET, column) != value, "the test must change the preset's value"
    shape = runs.row_shape(row(**{column: value}), [])
    assert getattr(shape, column) == value
    kept = set(runs.OVERRIDE_COLUMNS) - {column} - ({"kv_heads"} if column == "heads" else set())
    assert {k: getattr(shape, k) for k in kept} == {k: getattr(PRESET, k) for k in kept}
    assert f"{column}={value}" in shape.source


def test_heads_alone_keep_the_presets_grouping_where_it_divides():
    assert runs.row_shape(row(heads=32), []).kv_heads == PRESET.kv_heads
    assert runs.row_shape(row(heads=36), []).kv_heads == 36  # 8 does not divide 36


def test_the_rows_sequence_is_the_one_timed():
    short, long = (runs.interpret(row(seq_len=n)).config for n in (2048, 16384))
    assert (short.seq_len, long.seq_len) == (2048, 16384)
    assert long.shape.flop_per_token(long.seq_len) > short.shape.flop_per_token(short.seq_len)


def test_a_truncated_model_keeps_its_embedding_and_head():
    short = runs.row_shape(row(layers=12), [])
    per_layer = PRESET.block_params / PRESET.layers
    assert short.params == pytest.approx(PRESET.params - (PRESET.layers - 12) * per_layer)
    assert short.params > 12 / PRESET.layers * PRESET.params  # the embedding is not cut


@pytest.mark.parametrize("column", ["predicted_step_time_s", "predicted_peak_memory_gib"])
def test_a_truncated_model_is_timed_and_sized_with_its_own_layers(column):
    """Step time and peak memory grow by the same amount with every layer added, from a part
    that does not depend on the layer count (the embedding, the output layer and loss, the
    optimizer's and framework's fixed share): the layer count is the row's, not the preset's."""
    counts = (12, 24, 40, PRESET.layers)
    out = runs.predict_rows([row(layers=n) for n in counts])
    assert not [r["prediction_error"] for r in out if r.get("prediction_error")]
    values = [float(r[column]) for r in out]
    assert values == sorted(values) and len(set(values)) == len(values)
    points = list(zip(counts, values, strict=True))
    slopes = [(b - a) / (m - n) for (n, a), (m, b) in pairwise(points)]
    assert max(slopes) == pytest.approx(min(slopes), rel=0.05)
    fixed = values[0] - slopes[0] * counts[0]
    assert fixed > 0
    # The preset's 80 layers predicted for a 12-layer row would be this far off:
    assert values[-1] / values[0] > 1.5


def test_too_few_layers_for_a_mixture_of_experts_is_refused():
    base = next(r for r in runs.nemo_rows() if r["model"] == "DeepSeekV3")
    dense = transformer.SHAPES["deepseek-v3"].dense_layers
    with pytest.raises(ValueError, match=f"layers={dense}"):
        runs.row_shape({**base, "layers": str(dense)}, [])


@pytest.mark.parametrize(
    ("name", "preset"),
    [
        ("LLAMA2-13B", "llama2-13b"),
        ("Llama 3.2 3B", "llama3.2-3b"),
        ("GPT3-5B", "nemo-gpt3-5b"),
        ("GPT3-20B", "nemo-gpt3-20b"),
        ("Nemotron-8B", "nemotron-8b"),
        ("Nemotron-22B", "nemotron-22b"),
        ("Nemotron-340B", "nemotron-340b"),
        ("GPT3-175B", "gpt3-175b"),
    ],
)
def test_every_preset_is_found_by_its_name_in_any_case_and_separators(name, preset):
    assert runs.row_shape({"model": name}, []) is transformer.SHAPES[preset]


@pytest.mark.parametrize("preset", sorted(transformer.NEMO_SHAPES))
def test_nemos_shapes_have_the_parameters_their_names_say(preset):
    """Each shape read from NeMo's launcher configurations counts the parameters its name
    gives, within a tenth (the names round)."""
    named = float(re.search(r"(\d+)b$", preset).group(1)) * 1e9
    assert transformer.SHAPES[preset].params == pytest.approx(named, rel=0.1)


def test_a_name_no_preset_has_is_not_taken_for_a_shorter_one():
    with pytest.raises(ValueError, match="cannot infer the shape of 'Mixtral 8x22B'"):
        runs.row_shape({"model": "Mixtral 8x22B"}, [])
