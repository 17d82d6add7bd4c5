"""Does readers.numpy keep a GPU busy? A small GPT-style model trains on latent windows,
first on one batch already on the device, then fed by a PyTorch DataLoader whose workers
read with readers.numpy; the reader's cost is the step rate it loses.

    python benchmarks/bench_gpu_feed.py DATASET --json gpu_feed.json \\
        [--device cuda] [--workers 8] [--steps 300] [--repeats 3]

DATASET is a latent dataset of the job (e.g. window 100 of 200 float32 latents). Needs
the light install and torch only (no TensorFlow, no Beam), so it runs on a machine that
has PyTorch and a copy of the dataset. The model (issue 24's check): a linear projection
of each latent to d_model, `--layers` pre-norm causal Transformer layers (8 heads, 4x
feed-forward), a projection back, trained with AdamW to predict the next frame's latent
(MSE on the mask), in bfloat16 autocast on CUDA. Each contender runs `--steps` timed
steps after `--warmup` steps, `--repeats` times in turn; the JSON holds every run, and the
summary the medians and `fed / on device`. Target on an H200: at least 0.95.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time

import torch
from torch import nn

from readers.numpy import WindowSource


class TinyGPT(nn.Module):
    def __init__(self, dims: int, d_model: int, layers: int):
        super().__init__()
        self.embed = nn.Linear(dims, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead=8, dim_feedforward=4 * d_model,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, dims)

    def forward(self, window: torch.Tensor) -> torch.Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(window.shape[1],
                                                                device=window.device)
        return self.head(self.blocks(self.embed(window), mask=causal, is_causal=True))


def _step(model, optimizer, batch: dict, device: torch.device) -> None:
    window = batch["window"].to(device, non_blocking=True).float()
    mask = batch["mask"].to(device, non_blocking=True)[:, 1:]
    autocast = (torch.autocast("cuda", torch.bfloat16) if device.type == "cuda"
                else contextlib.nullcontext())
    with autocast:
        predicted = model(window[:, :-1])
    error = ((predicted.float() - window[:, 1:]) ** 2).mean(-1)
    loss = (error * mask).sum() / mask.sum().clamp(min=1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def _loader(path: str, batch_size: int, workers: int, seed: int):
    """Endless batches: a DataLoader over WindowSource, one read per batch per worker."""
    source = WindowSource(path, "train", features=["window", "mask"])
    generator = torch.Generator().manual_seed(seed)
    sampler = torch.utils.data.BatchSampler(
        torch.utils.data.RandomSampler(source, replacement=True, num_samples=1 << 30,
                                       generator=generator), batch_size, drop_last=True)
    return torch.utils.data.DataLoader(
        source, sampler=sampler, batch_size=None, num_workers=workers,
        pin_memory=torch.cuda.is_available(), persistent_workers=workers > 0,
        prefetch_factor=4 if workers else None)


def _steps_per_s(model, optimizer, batches, steps: int, warmup: int,
                 device: torch.device) -> float:
    for _ in range(warmup):
        _step(model, optimizer, next(batches), device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        _step(model, optimizer, next(batches), device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return steps / (time.perf_counter() - start)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--json", required=True)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--d_model", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    loader = _loader(args.dataset, args.batch_size, args.workers, seed=0)
    fed = iter(loader)
    first = next(fed)
    model = TinyGPT(first["window"].shape[-1], args.d_model, args.layers).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    resident = {k: v.to(device) for k, v in first.items() if k in ("window", "mask")}
    on_device = iter(lambda: resident, None)
    runs = {"on_device": [], "fed": []}
    for _ in range(args.repeats):
        runs["on_device"].append(_steps_per_s(model, optimizer, on_device, args.steps,
                                              args.warmup, device))
        runs["fed"].append(_steps_per_s(model, optimizer, fed, args.steps, args.warmup,
                                        device))
    medians = {name: statistics.median(rates) for name, rates in runs.items()}
    result = {"args": vars(args), "runs": runs, "median_steps_per_s": medians,
              "parameters": sum(p.numel() for p in model.parameters()),
              "windows_per_s_fed": medians["fed"] * args.batch_size,
              "fed_over_on_device": medians["fed"] / medians["on_device"]}
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print(f"{result['parameters'] / 1e6:.1f}M parameters on {device}: "
          f"{medians['on_device']:.1f} steps/s on device, {medians['fed']:.1f} fed by "
          f"{args.workers} DataLoader workers ({result['windows_per_s_fed']:.0f} windows/s); "
          f"fed / on device {result['fed_over_on_device']:.3f}")
    return result


if __name__ == "__main__":
    main()
