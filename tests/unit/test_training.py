"""The training loop (model_export.training): its precision and device choices (what is asked for
is what runs, and a name it does not know is an error that lists the ones it does), and a run
stopped part-way resumes to the very weights of one that was not."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from model_export.training import (
    PRECISIONS,
    Loop,
    add_hardware_arguments,
    choose_device,
    use_bf16,
)


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


def test_hardware_arguments_default_to_auto() -> None:
    parser = argparse.ArgumentParser()
    add_hardware_arguments(parser)
    assert parser.parse_args([]).precision == "auto"
    assert parser.parse_args([]).device == "auto"
    assert parser.parse_args(["--precision", "fp32"]).precision == "fp32"
    assert PRECISIONS[0] == "auto"
    with pytest.raises(SystemExit):
        parser.parse_args(["--precision", "half"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--device", "gpu"])


def test_unknown_device_is_refused() -> None:
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match="auto, cpu, cuda"):
        choose_device("tpu")


def test_device_choice_follows_what_torch_sees(capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    assert choose_device("cpu") == "cpu"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert choose_device("auto") == expected
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "training on cpu: CPU (asked for)"
    assert lines[1].startswith(f"training on {expected}: ")
    if torch.cuda.is_available():
        assert choose_device("cuda") == "cuda"
    else:
        with pytest.raises(ValueError, match="use --device cpu"):
            choose_device("cuda")


class _Stop(Exception):
    pass


def _tiny_run(workdir: Path, *, stop_at: int = -1) -> tuple[dict[str, Any], list[float], int]:
    """Two epochs of four batches on a 2-input linear model; the step_loss call numbered
    `stop_at` (counted from 0 in this run) raises, as an interrupted run would stop. Returns
    model.pt's weights and the loss over all the data: before training, then after each epoch."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(3)
    model = torch.nn.Linear(2, 1)
    inputs = torch.linspace(-1, 1, 32).reshape(16, 2)
    targets = inputs @ torch.tensor([[2.0], [-1.0]]) + 0.5
    calls = [0]

    def whole_loss() -> float:
        with torch.no_grad():
            return float(torch.nn.functional.mse_loss(model(inputs), targets))

    before = whole_loss()

    def step_loss(rows: list[int]) -> Any:
        if calls[0] == stop_at:
            raise _Stop
        calls[0] += 1
        return torch.nn.functional.mse_loss(model(inputs[rows]), targets[rows])

    history = Loop(
        model=model,
        parameter_groups=[{"params": list(model.parameters()), "lr": 0.1}],
        epochs=2,
        plan=lambda epoch: [[(epoch + b) % 4 * 4 + i for i in range(4)] for b in range(4)],
        step_loss=step_loss,
        evaluate=lambda: {"loss": whole_loss()},
        workdir=workdir,
        checkpoint_every=1,
        bf16=False,
        device="cpu",
    ).run()
    weights = torch.load(workdir / "model.pt", weights_only=True)
    assert [entry["epoch"] for entry in history] == [1, 2]
    return weights, [before, *(float(entry["loss"]) for entry in history)], calls[0]


def test_interrupted_training_resumes_to_the_same_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = pytest.importorskip("torch")
    straight, losses, steps = _tiny_run(tmp_path / "straight")
    assert steps == 8
    assert losses[2] < losses[1] < losses[0]
    with pytest.raises(_Stop):
        _tiny_run(tmp_path / "stopped", stop_at=5)
    assert not (tmp_path / "stopped" / "model.pt").exists()
    resumed, resumed_losses, steps = _tiny_run(tmp_path / "stopped")
    assert steps == 3  # the 5 steps done before the stop are not done again
    assert "resumed from" in capsys.readouterr().err
    assert resumed_losses[1:] == losses[1:]
    assert straight.keys() == resumed.keys()
    for name, tensor in straight.items():
        assert tensor.device.type == "cpu"
        assert torch.equal(tensor, resumed[name]), name


def test_run_config_records_the_history_of_the_run_it_continues(tmp_path: Path) -> None:
    from model_export.training import write_run_config

    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    history = [{"epoch": 1, "dev": {"select": 60.1}}]
    (before / "history.json").write_text(json.dumps(history), encoding="utf-8")
    write_run_config(after, {"lr": "2e-05"}, before / "model.pt")
    assert json.loads((after / "config.json").read_text()) == {
        "lr": "2e-05",
        "init_history": history,
    }
    write_run_config(after, {"lr": "2e-05"}, None)  # from the base model: nothing continued
    assert json.loads((after / "config.json").read_text()) == {"lr": "2e-05"}
