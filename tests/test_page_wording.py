"""The sentences the tensor-parallel and expert-parallel chapters glue from their page modules
read naturally for every value they can get: no "0 of them", no "N of the N", no claim about
1D and 2D together when their numbers differ."""

from __future__ import annotations

from dmlimits.book import expert_parallel_page, tensor_parallel_page


def test_counts_are_words_for_none_and_one():
    assert [tensor_parallel_page.count_text(n) for n in (0, 1, 2, 1024)] == [
        "none", "one", "2", "1,024"]  # fmt: skip


def test_shards_against_the_crossovers_in_every_case():
    words = tensor_parallel_page.shards_against_crossovers
    assert words(0, 2) == (
        "none of them is above the InfiniBand crossover and 2 are below the NVLink one"
    )
    assert words(1, 0) == (
        "one of them is above the InfiniBand crossover and none is below the NVLink one"
    )
    assert (
        words(3, 4) == "3 of them are above the InfiniBand crossover and 4 are below the NVLink one"
    )
    assert words(0, 0) == "none of them is above the InfiniBand crossover or below the NVLink one"


def test_shards_between_the_lines_in_every_case():
    words = tensor_parallel_page.shards_between
    assert words(31, 31, 0, 0) == "All 31 configurations lie between the lines."
    assert words(31, 29, 0, 2) == (
        "Of the 31 configurations, 29 lie between the lines, none above the InfiniBand "
        "crossover and 2 below the NVLink one."
    )
    assert words(31, 1, 10, 20).startswith("Of the 31 configurations, one lies between")
    assert words(31, 0, 11, 20).startswith("Of the 31 configurations, none lie between")


def test_max_degrees_name_1d_and_2d_apart_only_where_they_differ():
    words = tensor_parallel_page.max_degrees_text
    assert words(128, 32, 4, 4) == (
        "2D tensor parallelism hides its traffic up to a degree of 128 and 1D up to 32 (powers "
        "of two). On InfiniBand both stop at 4."
    )
    assert words(64, 64, 8, 4) == (
        "both 2D and 1D tensor parallelism hide their traffic up to a degree of 64 (powers of "
        "two). On InfiniBand 2D stops at 8 and 1D at 4."
    )


def test_expert_only_interfaces_in_every_case():
    words = expert_parallel_page.expert_only_text
    assert words(0).startswith("no interface is expert-only: all expert traffic rides")
    assert words(1).startswith("one interface is expert-only; the rest of the expert traffic")
    assert words(376).startswith("376 interfaces are expert-only; the rest")


def test_a_share_of_tokens_says_none_for_zero():
    assert expert_parallel_page.share_of_tokens(0.0) == "none of its tokens"
    assert expert_parallel_page.share_of_tokens(0.4375) == "43.8% of its tokens"
