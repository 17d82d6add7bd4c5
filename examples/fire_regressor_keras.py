"""A regressor of a fire's heat-release rate, frame by frame, from its pictures, in
Keras with the tf.data reader: masks as sample weights, labels and pixels normalised
with the dataset's own statistics.

    python examples/fire_regressor_keras.py                  # on small fires it makes
    python examples/fire_regressor_keras.py --data out/ --epochs 20

`--data` is a dataset of pixel windows with per-frame `labels` (a manifest of frame
folders and their heat-release rates, cut by the job: README, docs/format.md); without
it, the example makes small synthetic fires under `--workdir` (needs the [beam]
install): an orange blob whose area follows the heat release. A trainer needs
`pip install "video-window-shards[tf]"`.

What it does, and why:
- `readers.make_dataset(..., structure=("window", "labels", "mask"))` gives Keras the
  `(x, y, sample_weight)` triple it reads: the mask is each frame's weight in the loss,
  so a missing or undecodable frame (mask 0, zeros for pixels, label 0) and padding
  past a video's end never count. The model gives one value a frame, [batch, L, 1], so
  that the loss is per frame and the weights [batch, L] apply to it.
- The job computed each split's statistics exactly, over every stored frame once
  (`load_spec(data).stats["train"]`): the pixels are normalised per channel and the
  labels (kW, in the hundreds) to about unit scale with the training split's, in the
  tf.data pipeline; the validation error is given back in kW.
- `--checkpoint DIR` is Keras's `BackupAndRestore`: a run killed mid-training goes on
  from the start of the epoch it was in, with its model and optimizer (not the same
  batches: an exact resume of the reader is the README's `tf.train.Checkpoint` of the
  iterator). Its last line names the first epoch it ran ("resumed at epoch 3").
  `--stop_after_epoch K` kills the process (SIGKILL) right after epoch K's backup: a
  preemption, to try it.
- Memory at the fire story's full size, 540x960 frames in windows of 32, 6 steps and a
  validation split of 4 windows, the process's peak PSS sampled every 0.1 s: 2.2 GB at
  `--batch_size 1`, 3.7 GB at 2 (about 1.5 GB a window of the batch, each window 200 MB
  as float32: the batch, the model's activations and tf.data's read-ahead), so about
  25 GB at the default 16. Validation reads batches of `--batch_size` too.
- Its numbers are checked as they are parsed, and `--data` against what it reads
  (pixel windows [L, H, W, C] with one label a frame, the train split's statistics, a
  whole batch of them): a mistake is one line naming the flag, not a traceback.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import sys
from typing import Optional

import keras
import tensorflow as tf
from example_data import checked, fire_dataset

import readers
from readers.format import ChannelStats
from readers.format.numbers import whole_number_type

FEATURES = ("window", "labels", "mask")   # Keras's (x, y, sample_weight)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    """The command line, each number checked (argparse's error, naming the flag)."""
    count = whole_number_type(1)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a dataset of pixel windows with labels (default: "
                        "make small synthetic fires under --workdir)")
    parser.add_argument("--workdir", default="example_data/fire")
    parser.add_argument("--epochs", type=count, default=10)
    parser.add_argument("--steps", type=count, default=None,
                        help="steps in all, cut into --epochs equal epochs (default: "
                             "epochs of the train split's windows / batch_size)")
    parser.add_argument("--batch_size", type=count, default=16,
                        help="windows a step, and a validation batch")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=whole_number_type(0, 2**32 - 1), default=0)
    parser.add_argument("--checkpoint", default=None,
                        help="a folder for Keras's BackupAndRestore (resumes an epoch)")
    parser.add_argument("--stop_after_epoch", type=count, default=None,
                        help="kill this process (SIGKILL) right after epoch K's backup")
    args = parser.parse_args(argv)
    if not 0 < args.lr < math.inf:
        parser.error(f"argument --lr: must be a number > 0, got {args.lr}")
    if args.stop_after_epoch is not None and args.stop_after_epoch >= args.epochs:
        parser.error(f"argument --stop_after_epoch: must be less than --epochs "
                     f"({args.epochs}), got {args.stop_after_epoch}")
    return args


def dataset(data: str, split: str, batch_size: int, seed: int, pixels: ChannelStats,
            labels: ChannelStats, repeat: bool) -> tf.data.Dataset:
    """(normalised frames [B, L, H, W, C], normalised labels [B, L, 1], mask [B, L])."""
    ds = readers.make_dataset(data, split, batch_size, seed=seed, repeat=repeat,
                              drop_remainder=repeat, structure=FEATURES)
    return ds.map(lambda window, label, mask: (
        pixels.normalize(window), labels.normalize(label)[..., None], mask))


def regressor(frame_shape: tuple[int, ...], length: int, width: int = 16) -> keras.Model:
    """A small CNN per frame, then a GRU over the window's frames: one value a frame."""
    frame = keras.Sequential([
        keras.Input(frame_shape),
        keras.layers.Conv2D(width, 3, strides=2, padding="same", activation="relu"),
        keras.layers.Conv2D(2 * width, 3, strides=2, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D()])
    frames = keras.Input((length, *frame_shape))
    x = keras.layers.TimeDistributed(frame)(frames)
    x = keras.layers.GRU(2 * width, return_sequences=True)(x)
    return keras.Model(frames, keras.layers.Dense(1)(x))


class StopAfterEpoch(keras.callbacks.Callback):
    """A preemption, to try the resume: SIGKILL this process at the end of epoch `epoch`
    (counted from 1), after BackupAndRestore, listed before it, has saved that epoch."""

    def __init__(self, epoch: int):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch: int, logs: Optional[dict] = None) -> None:
        if epoch + 1 == self.epoch:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)


def train(args: argparse.Namespace) -> float:
    """Fit; returns the last epoch's mean loss (on normalised labels)."""
    data = args.data if args.data is not None else fire_dataset(args.workdir)
    spec = checked(data, "fire", batch_size=args.batch_size)
    stats = spec.stats["train"]
    keras.utils.set_random_seed(args.seed)
    window = spec.feature("window").shape          # [L, H, W, C]
    model = regressor(tuple(window[1:]), window[0])
    model.compile(optimizer=keras.optimizers.Adam(args.lr), loss="mse")

    train_ds = dataset(data, "train", args.batch_size, args.seed, stats["window"],
                       stats["labels"], repeat=True)
    steps = (max(1, args.steps // args.epochs) if args.steps
             else max(1, spec.splits["train"].windows // args.batch_size))
    callbacks = [keras.callbacks.BackupAndRestore(args.checkpoint)] if args.checkpoint else []
    if args.stop_after_epoch:
        callbacks.append(StopAfterEpoch(args.stop_after_epoch))
    history = model.fit(train_ds, epochs=args.epochs, steps_per_epoch=steps,
                        callbacks=callbacks, verbose=2)
    if not history.epoch:   # killed after the last epoch's backup, before fit's end
        print(f"nothing to train: {args.checkpoint} holds all {args.epochs} epochs", flush=True)
        return math.nan
    # the epochs this process ran: after a resume from a backup, from a later one than 1
    losses, first = history.history["loss"], history.epoch[0] + 1
    line = f"final loss {losses[-1]:.4f} after {args.epochs} epochs of {steps} steps " \
           f"({'resumed at ' if first > 1 else ''}epoch {first}: {losses[0]:.4f})"
    if spec.splits.get("validation") and spec.splits["validation"].windows:
        validation = dataset(data, "validation", args.batch_size, args.seed, stats["window"],
                             stats["labels"], repeat=False)
        batches = -(-spec.splits["validation"].windows // args.batch_size)
        # weighted by the mask, normalised; `steps`: tf.data cannot count the batches
        mse = model.evaluate(validation, steps=batches, verbose=0)
        rmse = math.sqrt(mse) * float(stats["labels"].std[0])
        line += f"; validation RMSE {rmse:.1f} (labels' units; their std in train " \
                f"{float(stats['labels'].std[0]):.1f})"
    print(line, flush=True)
    return losses[-1]


if __name__ == "__main__":
    train(parse_args())
