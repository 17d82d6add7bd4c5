"""A regressor of a fire's heat-release rate, frame by frame, from its pictures, in
PyTorch: the numpy reader, a DataLoader with 2 worker processes, masked frames left out
of the loss, labels and pixels normalised with the dataset's own statistics.

    python examples/fire_regressor_torch.py                  # on small fires it makes
    python examples/fire_regressor_torch.py --data out/ --epochs 20

`--data` is a dataset of pixel windows with per-frame `labels` (a manifest of frame
folders and their heat-release rates, cut by the job: README, docs/format.md); without
it, the example makes small synthetic fires under `--workdir` (needs the [beam]
install): an orange blob whose area follows the heat release. A trainer needs only
`pip install video-window-shards torch`.

What it does, and why:
- The job computed each split's statistics exactly, over every stored frame once
  (`load_spec(data).stats["train"]`): the pixels are normalised per channel and the
  labels (kW, in the hundreds) to about unit scale with the training split's, and the
  model's output is turned back into kW with them.
- That normalisation is the reader's `transform`: it runs in the DataLoader's workers,
  on each batch as it is read, not in the training loop.
- A frame whose mask is 0 (a missing or undecodable picture, or padding past a video's
  end) has zeros for pixels and 0 for a label: its loss weight is its mask.
- Each epoch is an `EpochBatches` plan (a permutation of (seed, epoch)) as the
  DataLoader's sampler; `--checkpoint FILE` saves the model, the optimizer and the plan's
  state every `--checkpoint_every` steps and at each epoch's end, and the same command
  goes on from it with the batches a run never stopped would have had.
- Every read holds `--batch_size` windows at most, validation's too (it once read 64 at
  a time whatever the flag said: at 540x960, 12.7 GB of float32 frames alone). Memory
  at the fire story's full size, 540x960 frames in windows of 32 (each window 200 MB
  as float32), 6 steps and a validation split of 4 windows, the peak of the process
  tree's summed PSS sampled every 0.1 s: 2.4 GB at `--batch_size 1` (the training
  process 1.3 GB of it) and 4.6 GB at 2 (2.3 GB): about 2.1 GB a window of the batch,
  held in the loop, in the model's activations and in each worker's 2 batches read
  ahead (the DataLoader's `prefetch_factor`). So the default 16 would need about 34 GB
  there: pass 1 or 2, or have the job store frames smaller (`--frame_size 270x480`).
- The DataLoader's workers start with `readers.numpy.workers.end_with_parent`: a killed
  trainer takes them along (latent_gpt_torch.py says why it is needed); they come from
  `readers.numpy.workers.forkserver()`, whose server has torch and the reader imported once.
- Its numbers are checked as they are parsed, and `--data` against what it reads
  (pixel windows [L, H, W, C] with one label a frame, the train split's statistics, a
  whole batch of them): a mistake is one line naming the flag, not a traceback.
"""
from __future__ import annotations

import argparse
import functools
import math
import os
from typing import Any, Optional

import torch
from example_data import checked, fire_dataset
from torch import nn

from readers.format import ChannelStats, DatasetSpec
from readers.format.numbers import whole_number_type
from readers.numpy import EpochBatches, WindowSource
from readers.numpy.workers import end_with_parent, forkserver


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    """The command line, each number checked (argparse's error, naming the flag)."""
    count = whole_number_type(1)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a dataset of pixel windows with labels (default: "
                        "make small synthetic fires under --workdir)")
    parser.add_argument("--workdir", default="example_data/fire")
    parser.add_argument("--epochs", type=count, default=10)
    parser.add_argument("--steps", type=count, default=None,
                        help="stop after this many steps in all (default: all epochs)")
    parser.add_argument("--batch_size", type=count, default=16,
                        help="windows a step, and a validation batch")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=whole_number_type(0, 2**32 - 1), default=0)
    parser.add_argument("--workers", type=whole_number_type(0), default=2,
                        help="DataLoader worker processes")
    parser.add_argument("--checkpoint", default=None,
                        help="a file: saved as the run goes, resumed from when it exists")
    parser.add_argument("--checkpoint_every", type=count, default=50, help="steps")
    args = parser.parse_args(argv)
    if not 0 < args.lr < math.inf:
        parser.error(f"argument --lr: must be a number > 0, got {args.lr}")
    return args


def prepare(batch: dict[str, Any], pixels: ChannelStats, labels: ChannelStats
            ) -> dict[str, Any]:
    """The reader's transform: normalised frames [B, L, H, W, C] and labels [B, L], and
    the loss's weights (the mask). A module-level function (with functools.partial) so
    that it pickles into the DataLoader's workers."""
    return {"frames": pixels.normalize(batch["window"]),
            "labels": labels.normalize(batch["labels"]), "weights": batch["mask"]}


class Regressor(nn.Module):
    """A small CNN per frame, then a GRU over the window's frames: one value a frame."""

    def __init__(self, channels: int, width: int = 16):
        super().__init__()
        self.frame = nn.Sequential(
            nn.Conv2d(channels, width, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.time = nn.GRU(2 * width, 2 * width, batch_first=True)
        self.head = nn.Linear(2 * width, 1)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        b, n = frames.shape[:2]
        x = self.frame(frames.flatten(0, 1).permute(0, 3, 1, 2)).view(b, n, -1)
        return self.head(self.time(x)[0]).squeeze(-1)


def masked_mse(predicted: torch.Tensor, target: torch.Tensor,
               weights: torch.Tensor) -> torch.Tensor:
    return (((predicted - target) ** 2) * weights).sum() / weights.sum().clamp(min=1)


def validation_rmse(model: nn.Module, data: str, spec: DatasetSpec, prepare_batch: Any,
                    labels: ChannelStats, batch_size: int) -> Optional[float]:
    """The root mean squared error in the labels' own units (kW) over the validation
    split's real frames, read `batch_size` windows at a time, as training reads them (a
    fixed larger batch once held more in memory than training ever did), or None
    without one."""
    if "validation" not in spec.splits or not spec.splits["validation"].windows:
        return None
    source = WindowSource(data, "validation", ["window", "mask", "labels"],
                          transform=prepare_batch)
    total, weight = 0.0, 0.0
    with torch.no_grad():
        for start in range(0, len(source), batch_size):
            batch = source[list(range(start, min(start + batch_size, len(source))))]
            predicted = labels.denormalize(model(torch.as_tensor(batch["frames"])))
            truth = labels.denormalize(torch.as_tensor(batch["labels"]))
            weights = torch.as_tensor(batch["weights"])
            total += float((((predicted - truth) ** 2) * weights).sum())
            weight += float(weights.sum())
    return math.sqrt(total / max(weight, 1))


def train(args: argparse.Namespace) -> float:
    """The training loop; returns the last step's loss (on normalised labels)."""
    data = args.data if args.data is not None else fire_dataset(args.workdir)
    spec = checked(data, "fire", batch_size=args.batch_size)
    stats = spec.stats["train"]
    prepare_batch = functools.partial(prepare, pixels=stats["window"], labels=stats["labels"])
    source = WindowSource(data, "train", ["window", "mask", "labels"], transform=prepare_batch)

    torch.manual_seed(args.seed)
    model = Regressor(stats["window"].channels)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    def plan_for(epoch: int) -> EpochBatches:
        return EpochBatches(source, args.batch_size, seed=args.seed, epoch=epoch)

    step, plan = 0, plan_for(0)
    if args.checkpoint and os.path.exists(args.checkpoint):
        saved = torch.load(args.checkpoint, weights_only=False)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        plan, step = EpochBatches.resume(source, saved["plan"]), saved["step"]
        print(f"resumed from step {step} (epoch {plan.source.epoch}, "
              f"batch {plan.start_step} of {plan.steps})", flush=True)

    last, total = math.nan, args.steps if args.steps is not None else math.inf
    for epoch in range(plan.source.epoch, args.epochs):
        if step >= total:
            break
        if epoch != plan.source.epoch:
            plan = plan_for(epoch)
        loader = torch.utils.data.DataLoader(
            plan.source, sampler=plan, batch_size=None, num_workers=args.workers,
            multiprocessing_context=forkserver() if args.workers else None,
            worker_init_fn=end_with_parent)   # workers that start cheaply, die with this
        losses = []
        for batch_step, batch in enumerate(loader, start=plan.start_step):
            if step >= total:
                break
            loss = masked_mse(model(batch["frames"]), batch["labels"], batch["weights"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step, last = step + 1, loss.item()
            losses.append(last)
            if args.checkpoint and (step % args.checkpoint_every == 0
                                    or batch_step + 1 == plan.steps):
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "plan": plan.state(batch_step + 1), "step": step},
                           args.checkpoint + ".partial")
                os.replace(args.checkpoint + ".partial", args.checkpoint)
        if losses:
            print(f"epoch {epoch} steps {step} first loss {losses[0]:.4f} "
                  f"mean loss {sum(losses) / len(losses):.4f}", flush=True)
    rmse = validation_rmse(model, data, spec, prepare_batch, stats["labels"], args.batch_size)
    print(f"final loss {last:.4f} after {step} steps"
          + (f"; validation RMSE {rmse:.1f} (labels' units; their std in train "
             f"{float(stats['labels'].std[0]):.1f})" if rmse is not None else ""), flush=True)
    return last


if __name__ == "__main__":
    train(parse_args())
