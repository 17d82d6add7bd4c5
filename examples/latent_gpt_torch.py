"""A small causal transformer (GPT) that predicts each video's next latent, in PyTorch,
on one process or many (DDP on gloo), with an exact resume after a kill.

    python examples/latent_gpt_torch.py                       # one process
    torchrun --nproc_per_node 2 examples/latent_gpt_torch.py  # two, DDP on gloo
    torchrun --nproc_per_node 2 examples/latent_gpt_torch.py --data out/ --epochs 5

`--data` is a dataset of latent windows (the README's first command makes one in
`out/`); without it, rank 0 makes the same one under `--workdir` (needs the [beam]
install). A trainer needs only `pip install video-window-shards torch`.

On the README's sample (371 windows), one process: the loss (next-latent mean squared
error) falls from 1.4 to 0.04 in 3 epochs (72 steps, about 15 s on 2 cores) and to 0.018
in 10; copying the last frame scores 0.025, and the sample's noise (std 0.1) puts the
floor at 0.01.

What each step does, and why:
- Each epoch, every rank builds `EpochBatches(..., shard_index=rank, num_shards=world,
  drop_remainder=False)`: the epoch's one global permutation (a function of seed and
  epoch alone), cut into equal slices, one per rank, so the ranks together see every
  window once. The split's `len % world` leftover windows (at most world - 1, a different
  one each epoch) sit the epoch out, so that every rank takes the same number of steps
  (DDP needs that); `drop_remainder=False` keeps each rank's last short batch.
- A clip at read time (`readers.clips.Clip`, `--clip` + 1 frames at a random place in each
  window, new each epoch) is cut by the reader: frames, mask alike.
- The target is the next latent: the model reads frames 0..n-1 of a clip and predicts
  frames 1..n. A frame counts in the loss only when it and the frame before are real
  (mask 1): padding past a video's end never enters it. The shift is the reader's
  `transform`, run on each batch where it is read (a DataLoader worker), after the clip
  is cut; it is deterministic, so a resumed run's batches are still those of a run never
  stopped.
- Each video's recipe (the dataset's `metadata`, 4 floats) conditions every position.
- Every `--checkpoint_every` steps, at each epoch's end and at the last step, each rank
  saves its own checkpoint (model, optimizer, and its `EpochBatches.state`), named by the
  step, written whole then renamed. A restart (the same command) loads the newest step
  every rank has saved and goes on with the batches an unstopped run would have had.
  `--stop_after_step K` kills the process (SIGKILL) right after step K's checkpoint: a
  preemption, to try it.
- The DataLoader's workers start with `readers.numpy.workers.end_with_parent`, so that a killed
  rank takes them along, and their forkserver with them. PyTorch's own check watches a
  worker's parent, which under forkserver is the forkserver, and the forkserver lives as
  long as its workers: without it, each kill left a worker (about 250 MB) and its
  forkserver running for good, holding the output pipe (`... | tail` never ended). They
  come from `readers.numpy.workers.forkserver()`, whose server has torch and the reader
  imported once, and hand each batch over without a copy (docs/readers.md).
- Its numbers are checked as they are parsed, and `--data` against what it reads (latent
  windows [L, C] that hold a clip of `--clip` + 1 frames, in `--split`): a mistake is
  one line naming the flag, not a traceback from deep in the loop.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import signal
from typing import Any, Optional

import torch
import torch.distributed as dist
from example_data import checked, latent_dataset, refuse
from torch import nn

from readers.format.numbers import SEEDS, whole_number_type
from readers.numpy import Clip, EpochBatches, WindowSource
from readers.numpy.workers import end_with_parent, forkserver


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    """The command line, each number checked (argparse's error, naming the flag)."""
    count = whole_number_type(1)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a dataset of latent windows (default: make one "
                        "under --workdir, as the README's first command does)")
    parser.add_argument("--workdir", default="example_data/latent_gpt",
                        help="where the dataset is made without --data")
    parser.add_argument("--split", default="train")
    parser.add_argument("--epochs", type=count, default=3)
    parser.add_argument("--steps", type=count, default=None,
                        help="stop after this many steps in all (default: all epochs)")
    parser.add_argument("--batch_size", type=count, default=16, help="windows a rank a step")
    parser.add_argument("--clip", type=count, default=32,
                        help="frames the model reads (a clip of one more is read)")
    parser.add_argument("--width", type=count, default=64, help="the transformer's width")
    parser.add_argument("--layers", type=count, default=2)
    parser.add_argument("--heads", type=count, default=4, help="a divisor of --width")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=whole_number_type(0, SEEDS - 1), default=0)
    parser.add_argument("--workers", type=whole_number_type(0), default=1,
                        help="DataLoader worker processes a rank (0: read in the loop)")
    parser.add_argument("--checkpoint", default=None,
                        help="a folder for each rank's checkpoints; a run resumes from it")
    parser.add_argument("--checkpoint_every", type=count, default=20, help="steps")
    parser.add_argument("--stop_after_step", type=count, default=None,
                        help="kill this process (SIGKILL) right after step K's checkpoint")
    parser.add_argument("--log_dir", default=None,
                        help="each rank writes rank<r>.jsonl there: a line a step with "
                             "its epoch, step, window numbers and the loss")
    args = parser.parse_args(argv)
    if not 0 < args.lr < math.inf:
        parser.error(f"argument --lr: must be a number > 0, got {args.lr}")
    if args.width % args.heads:
        parser.error(f"argument --heads: must divide --width ({args.width}), got {args.heads}")
    return args


class GPT(nn.Module):
    """Latent frames in, the next latent frame out, each position seeing only itself and
    the frames before it; the recipe (metadata) added to every position."""

    def __init__(self, dim: int, metadata: int, length: int, width: int, layers: int,
                 heads: int):
        super().__init__()
        self.embed = nn.Linear(dim, width)
        self.recipe = nn.Linear(metadata, width) if metadata else None
        self.position = nn.Parameter(torch.randn(length, width) * 0.02)
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, dim))

    def forward(self, frames: torch.Tensor, recipe: Optional[torch.Tensor]) -> torch.Tensor:
        n = frames.shape[1]
        h = self.embed(frames) + self.position[:n]
        if self.recipe is not None:
            h = h + self.recipe(recipe)[:, None]
        causal = nn.Transformer.generate_square_subsequent_mask(n)
        return self.head(self.blocks(h, mask=causal, is_causal=True))


def next_latent(batch: dict[str, Any]) -> dict[str, Any]:
    """The reader's transform: a batch of clips -> inputs (frames 0..n-1), targets
    (frames 1..n), the loss's weights (1 where a target and the frame before it are both
    real) and the recipe. At module level, so that it pickles into the workers."""
    window, mask = batch["window"], batch["mask"]
    return {"inputs": window[:, :-1], "targets": window[:, 1:],
            "weights": mask[:, :-1] * mask[:, 1:], "recipe": batch.get("metadata")}


def masked_mse(predicted: torch.Tensor, target: torch.Tensor,
               weights: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the frames whose weight is 1 (0 when there are none)."""
    per_frame = ((predicted - target) ** 2).mean(dim=-1)
    return (per_frame * weights).sum() / weights.sum().clamp(min=1)


def setup() -> tuple[int, int]:
    """(rank, world): a gloo process group under torchrun, else one process."""
    if "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
        dist.init_process_group("gloo")
        torch.set_num_threads(1)   # the ranks share the machine's cores
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def everyone(value: int, op: Any) -> int:
    """`value` reduced over the ranks (itself on one process)."""
    if not dist.is_initialized():
        return value
    tensor = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(tensor, op=op)
    return int(tensor.item())


def mean_over_ranks(value: torch.Tensor) -> float:
    value = value.detach().clone()
    if dist.is_initialized():
        dist.all_reduce(value)
        value /= dist.get_world_size()
    return float(value)


def latest_checkpoint(folder: Optional[str], rank: int) -> Optional[str]:
    """This rank's checkpoint of the newest step that every rank has saved (a kill may
    have come between two ranks' saves), or None."""
    steps = [int(m.group(1)) for path in glob.glob(os.path.join(folder or "", f"rank{rank}-*.pt"))
             if (m := re.search(r"-step(\d+)\.pt$", path))]
    newest = max(steps, default=-1)
    common = everyone(newest, dist.ReduceOp.MIN)
    if common < 0:
        return None
    return os.path.join(folder, f"rank{rank}-step{common}.pt")


def save_checkpoint(folder: str, rank: int, step: int, payload: dict[str, Any]) -> None:
    """Written whole, then renamed (a kill leaves the last one intact); this rank's two
    newest kept, so that a step every rank has saved is always there."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"rank{rank}-step{step}.pt")
    torch.save(payload, path + ".partial")
    os.replace(path + ".partial", path)
    saved = sorted(glob.glob(os.path.join(folder, f"rank{rank}-step*.pt")),
                   key=lambda p: int(re.search(r"step(\d+)\.pt$", p).group(1)))
    for old in saved[:-2]:
        os.remove(old)


def train(args: argparse.Namespace) -> float:
    """The training loop; returns the last step's loss (the mean over ranks)."""
    rank, world = setup()
    data = args.data
    if data is None:
        if rank == 0:
            latent_dataset(args.workdir)
        if dist.is_initialized():
            dist.barrier()
        data = os.path.join(args.workdir, "dataset")

    spec = checked(data, "latent", args.split)
    names = [f.name for f in spec.features]
    features = ["window", "mask"] + (["metadata"] if "metadata" in names else [])
    length, dim = spec.feature("window").shape
    metadata = spec.feature("metadata").shape[0] if "metadata" in names else 0
    if args.clip >= length:
        refuse(f"--clip {args.clip}: the model reads a clip of {args.clip + 1} frames, "
               f"more than the dataset's windows hold ({length})")
    clip = Clip(args.clip + 1, offset="random", seed=args.seed)
    # the target's shift runs where each batch is read: in the DataLoader's workers
    source = WindowSource(data, args.split, features, clip=clip, transform=next_latent)

    torch.manual_seed(args.seed)
    model = GPT(dim, metadata, args.clip, args.width, args.layers, args.heads)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)

    def plan_for(epoch: int) -> EpochBatches:
        return EpochBatches(source, args.batch_size, seed=args.seed, epoch=epoch,
                            shard_index=rank, num_shards=world, drop_remainder=False)

    step, plan = 0, plan_for(0)
    resume_from = latest_checkpoint(args.checkpoint, rank) if args.checkpoint else None
    if resume_from:
        saved = torch.load(resume_from, weights_only=False)
        (model.module if world > 1 else model).load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        if saved["plan"]["num_shards"] != world:
            raise SystemExit(f"{resume_from} was saved by a run of {saved['plan']['num_shards']} "
                             f"processes; resume it with as many (this run has {world})")
        plan, step = EpochBatches.resume(source, saved["plan"]), saved["step"]
        if rank == 0:
            print(f"resumed from step {step} (epoch {plan.source.epoch}, "
                  f"batch {plan.start_step} of {plan.steps})", flush=True)

    log = None
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)
        log = open(os.path.join(args.log_dir, f"rank{rank}.jsonl"), "a")
    last = math.nan
    total = args.steps if args.steps is not None else math.inf
    for epoch in range(plan.source.epoch, args.epochs):
        if step >= total:
            break
        if epoch != plan.source.epoch:
            plan = plan_for(epoch)   # a new plan each epoch: the epoch's permutation
        loader = torch.utils.data.DataLoader(
            plan.source, sampler=plan, batch_size=None, num_workers=args.workers,
            multiprocessing_context=forkserver() if args.workers else None,
            worker_init_fn=end_with_parent)   # workers that start cheaply, die with this
        for batch_step, batch in enumerate(loader, start=plan.start_step):
            if step >= total:
                break
            predicted = model(batch["inputs"], batch["recipe"])
            loss = masked_mse(predicted, batch["targets"], batch["weights"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            last = mean_over_ranks(loss)
            if log:
                log.write(json.dumps({"epoch": epoch, "step": step, "batch": batch_step,
                                      "windows": plan.batch(batch_step), "loss": last}) + "\n")
                log.flush()
            if rank == 0 and (step % 10 == 0 or step == 1):
                print(f"epoch {epoch} step {step} loss {last:.4f}", flush=True)
            if args.checkpoint and (step % args.checkpoint_every == 0 or step == total
                                    or batch_step + 1 == plan.steps
                                    or step == args.stop_after_step):
                save_checkpoint(args.checkpoint, rank, step, {
                    "model": (model.module if world > 1 else model).state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "plan": plan.state(batch_step + 1), "step": step})
            if step == args.stop_after_step:
                if dist.is_initialized():
                    dist.barrier()       # every rank's checkpoint of this step is written
                os.kill(os.getpid(), signal.SIGKILL)
    if rank == 0:
        print(f"final loss {last:.4f} after {step} steps", flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()
    return last


if __name__ == "__main__":
    train(parse_args())
