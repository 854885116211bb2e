"""The training loop's precision choice (model_export.training): what is asked for is what runs,
and a name it does not know is an error that lists the ones it does."""

from __future__ import annotations

import argparse

import pytest

from model_export.training import PRECISIONS, add_precision_argument, use_bf16


def test_asked_precision_is_used(capsys: pytest.CaptureFixture[str]) -> None:
    assert use_bf16("bf16") is True
    assert use_bf16("fp32") is False
    assert capsys.readouterr().err.splitlines() == [
        "training in bf16 autocast (asked for)",
        "training in fp32 (asked for)",
    ]


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="auto, bf16, fp32"):
        use_bf16("fp16")


def test_precision_argument_defaults_to_auto() -> None:
    parser = argparse.ArgumentParser()
    add_precision_argument(parser)
    assert parser.parse_args([]).precision == "auto"
    assert parser.parse_args(["--precision", "fp32"]).precision == "fp32"
    assert PRECISIONS[0] == "auto"
    with pytest.raises(SystemExit):
        parser.parse_args(["--precision", "half"])
