"""`python -m dmlimits matmul`: the single-GPU model from a shell."""

import json

import pytest
from dmlimits import cli
from test_matmul import ROWS, _row_id


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["matmul", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_command_reproduces_the_printed_table(capsys, row):
    """With the preset as it is: no --set (issue #12)."""
    code, out, _ = run(
        capsys,
        "--gpu",
        row["gpu"],
        "--shape",
        f"{row['d1']}x{row['d2']}",
        "--nanobatch",
        row["nanobatch"],
        "--kind",
        row["kind"],
        "--json",
    )
    assert code == 0
    result = json.loads(out)
    assert abs(result["efficiency"] - float(row["efficiency"])) <= 0.01
    assert result["time_s"] > 0 and result["binding"] in ("hbm", "l2", "shared", "arithmetic")


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (["--shape", "4096y16384", "--nanobatch", "512"], "--shape"),
        (["--shape", "4096x16384", "--nanobatch", "0"], "--nanobatch"),
        (["--shape", "4096x16384", "--nanobatch", "12.5"], "--nanobatch"),
        (["--shape", "4096x16384", "--nanobatch", "512", "--kind", "backward"], "--kind"),
        (["--shape", "4096x16384", "--nanobatch", "512", "--gpu", "h10"], "gpu"),
        (
            ["--shape", "4096x16384", "--nanobatch", "512", "--set", "hardware.sms=-1"],
            "hardware.sms",
        ),
    ],
)
def test_bad_arguments_give_one_line(capsys, args, key):
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and key in err
