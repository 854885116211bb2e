"""The training loop both models share: batches planned per epoch from a seed, AdamW with linear
warm-up and decay, on the CPU or a CUDA GPU (`--device`, `choose_device`), bf16 autocast where
the device computes bf16 natively (`--precision`, `use_bf16`), a progress line, and checkpoints
that let an interrupted run resume where it stopped, with the same batches.

`<workdir>/checkpoint.pt` holds the model, optimizer, scheduler, step and the per-epoch history;
it is written atomically every `checkpoint_every` steps and after each epoch. The history (the
evaluation after each epoch) is also written to `<workdir>/history.json`, and the trained
weights to `<workdir>/model.pt` at the end.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WARMUP_FRACTION = 0.05
PRECISIONS = ("auto", "bf16", "fp32")
DEVICES = ("auto", "cpu", "cuda")


def choose_device(wanted: str) -> str:
    """The torch device for `--device` (auto: cuda where torch sees a GPU, else cpu); the choice
    and its reason are printed. Asking for cuda where torch sees none is an error that says why."""
    import torch

    if wanted not in DEVICES:
        raise ValueError(f"--device must be one of {', '.join(DEVICES)}, not {wanted!r}")
    available = bool(torch.cuda.is_available())
    if wanted == "cuda" and not available:
        raise ValueError(
            f"--device cuda, but torch {torch.__version__} sees no CUDA device (a CPU build of "
            "torch, or no GPU here): use --device cpu, or install a CUDA build of torch"
        )
    chosen = "cuda" if available and wanted != "cpu" else "cpu"
    if wanted != "auto":
        why = "asked for"
    else:
        why = "torch sees a CUDA device" if available else "torch sees no CUDA device"
    name = torch.cuda.get_device_name(0) if chosen == "cuda" else "CPU"
    print(f"training on {chosen}: {name} ({why})", file=sys.stderr)
    return chosen


def native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX), so that bf16 autocast
    is faster than fp32. Without it bf16 is emulated, and much slower than fp32."""
    import torch

    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(check()) if check is not None else False
    except RuntimeError:
        return False


def use_bf16(precision: str, device: str = "cpu") -> bool:
    """bf16 autocast for `--precision` (auto: where the device computes bf16 natively: a GPU
    torch reports bf16 support for, a CPU with AVX512-BF16 or AMX); the choice and its reason
    are printed."""
    if precision not in PRECISIONS:
        raise ValueError(f"--precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if precision == "auto" and device == "cuda":
        import torch

        chosen = bool(torch.cuda.is_bf16_supported())
        why = "this GPU computes bf16" if chosen else "this GPU has no bf16"
    elif precision == "auto":
        chosen = native_bf16()
        why = "this CPU computes bf16 natively" if chosen else "this CPU has no native bf16"
    else:
        chosen = precision == "bf16"
        why = "asked for"
    print(f"training in {'bf16 autocast' if chosen else 'fp32'} ({why})", file=sys.stderr)
    return chosen


def add_hardware_arguments(parser: Any) -> None:
    """`--device` (`choose_device`) and `--precision` (`use_bf16`), both `auto` by default."""
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="where to train; auto (default): cuda where torch sees a GPU, cpu elsewhere",
    )
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="bf16 autocast or fp32; auto (default): bf16 where the device computes it natively "
        "(a GPU with bf16; a CPU with AVX512-BF16 or AMX), fp32 elsewhere, where emulated bf16 "
        "is many times slower",
    )


def write_run_config(workdir: Path, settings: dict[str, Any], init: Path | None) -> None:
    """`<workdir>/config.json`: a run's `settings`, and with `--init`, the history of the run it
    continues (`init_history`), as that run's workdir recorded it."""
    if init is not None and (init.parent / "history.json").exists():
        settings = {
            **settings,
            "init_history": json.loads((init.parent / "history.json").read_text(encoding="utf-8")),
        }
    (workdir / "config.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")


def progress(text: str) -> None:
    """Rewrite the progress line on stderr."""
    sys.stderr.write("\r" + text.ljust(100))
    sys.stderr.flush()


@dataclass
class Loop:
    """What one training run needs. `plan(epoch)` returns that epoch's batches (the same for
    the same epoch, so that a resumed run continues where it stopped); `step_loss(batch)` returns
    the loss tensor of one batch; `evaluate()` the figures recorded after each epoch."""

    model: Any
    parameter_groups: Sequence[dict[str, Any]]
    epochs: int
    plan: Callable[[int], Sequence[Any]]
    step_loss: Callable[[Any], Any]
    evaluate: Callable[[], dict[str, Any]]
    workdir: Path
    checkpoint_every: int = 100
    items_per_batch: int = 1
    bf16: bool = True
    device: str = "cpu"
    """Where the model trains (`choose_device`); step_loss and evaluate put their tensors on the
    model's device. Checkpoints resume on any device; model.pt is written from CPU tensors."""

    def run(self) -> list[dict[str, Any]]:
        """Train (or resume) to the end; returns the history."""
        import torch

        self.workdir.mkdir(parents=True, exist_ok=True)
        self.model.to(self.device)  # in place: the parameter groups keep their tensors
        checkpoint_path = self.workdir / "checkpoint.pt"
        steps_per_epoch = len(self.plan(0))
        total = steps_per_epoch * self.epochs
        warmup = max(1, int(total * WARMUP_FRACTION))

        def schedule(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            return max(0.0, (total - step) / max(1, total - warmup))

        optimizer = torch.optim.AdamW(list(self.parameter_groups), weight_decay=0.01)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        step = 0
        history: list[dict[str, Any]] = []
        if checkpoint_path.exists():
            state = torch.load(checkpoint_path, weights_only=False, map_location=self.device)
            self.model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            step = int(state["step"])
            history = list(state["history"])
            print(f"resumed from {checkpoint_path} at step {step}/{total}", file=sys.stderr)

        def save() -> None:
            tmp = checkpoint_path.with_suffix(".tmp")
            torch.save(
                {
                    "model": self.model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "step": step,
                    "history": history,
                },
                tmp,
            )
            tmp.replace(checkpoint_path)

        started = time.monotonic()
        first = step
        parameters = [p for group in self.parameter_groups for p in group["params"]]
        while step < total:
            epoch, position = divmod(step, steps_per_epoch)
            self.model.train()
            plan = self.plan(epoch)
            running = 0.0
            for index in range(position, steps_per_epoch):
                with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.bf16):
                    value = self.step_loss(plan[index])
                optimizer.zero_grad(set_to_none=True)
                value.backward()
                torch.nn.utils.clip_grad_norm_(parameters, 1.0)
                optimizer.step()
                scheduler.step()
                step += 1
                current = float(value.detach())
                running = 0.98 * running + 0.02 * current if running else current
                rate = (step - first) / max(time.monotonic() - started, 1e-9)
                progress(
                    f"epoch {epoch + 1}/{self.epochs} step {index + 1}/{steps_per_epoch} "
                    f"loss {running:.4f} {rate * self.items_per_batch:.1f}/s "
                    f"eta {(total - step) / max(rate, 1e-9) / 60:.1f} min"
                )
                if step % self.checkpoint_every == 0:
                    save()
            sys.stderr.write("\n")
            figures = self.evaluate()
            history.append({"epoch": epoch + 1, "step": step, **figures})
            print(f"epoch {epoch + 1}: {figures}", file=sys.stderr)
            save()
            (self.workdir / "history.json").write_text(
                json.dumps(history, indent=2) + "\n", encoding="utf-8"
            )
        weights = {name: tensor.detach().cpu() for name, tensor in self.model.state_dict().items()}
        torch.save(weights, self.workdir / "model.pt")
        print(f"trained model written to {self.workdir / 'model.pt'}", file=sys.stderr)
        return history


def length_batches(
    items: Sequence[Any], length: Callable[[Any], int], size: int, seed: int
) -> list[list[Any]]:
    """Batches of `size` items: shuffled with `seed`, sorted by length within pools of 50
    batches (less padding), and the batches shuffled again."""
    import random

    rng = random.Random(seed)
    items = list(items)
    rng.shuffle(items)
    pool = size * 50
    result: list[list[Any]] = []
    for start in range(0, len(items), pool):
        chunk = sorted(items[start : start + pool], key=length)
        result.extend(chunk[s : s + size] for s in range(0, len(chunk), size))
    rng.shuffle(result)
    return result
