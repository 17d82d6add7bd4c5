"""The README's sample and the runnable examples (examples/): the sample has structure a
model can learn, and each example, run as a user runs it, learns (its loss falls), the
DDP one sees every window once an epoch, and a killed run resumes with the batches it
would have had."""
import filecmp
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from format_datasets import kind_videos, write_kind
from helpers import EXAMPLES, assert_session_ends, assert_verified, example_module

from beam_jobs.sample import write_latent_sample
from readers import load_spec


def _ranks(values) -> np.ndarray:
    return np.argsort(np.argsort(values))


def _autocorrelation(x: np.ndarray, lag: int) -> float:
    """Of one video's latents [T, C], over all its channels."""
    x = x - x.mean(axis=0)
    return float((x[lag:] * x[:-lag]).sum() / (x * x).sum())


def test_the_sample_has_structure_in_time_that_its_recipe_drives(tmp_path):
    """Read back with TensorFlow: each video's latents are smooth (lag-1 autocorrelation
    above 0.9; white noise, the sample before, has about 0), and recipe[0] sets their
    tempo (the faster, the less alike frames 10 apart are); the same seed writes the
    same bytes."""
    paths = write_latent_sample(str(tmp_path / "a"))
    lag1, lag10, tempo = [], [], []
    for record in tf.data.TFRecordDataset(paths):
        example = tf.train.Example.FromString(record.numpy())
        (frames,) = example.features.feature["frames"].bytes_list.value
        latents = tf.io.parse_tensor(frames, tf.float32).numpy()
        assert latents.shape[1] == 200 and 700 <= len(latents) < 900
        assert 0.8 < latents.std(axis=0).mean() < 1.2
        lag1.append(_autocorrelation(latents, 1))
        lag10.append(_autocorrelation(latents, 10))
        tempo.append(example.features.feature["recipe"].float_list.value[0])
    assert len(lag1) == 24 and min(lag1) > 0.9, lag1
    assert np.corrcoef(_ranks(tempo), _ranks(lag10))[0, 1] < -0.9, (tempo, lag10)
    again = write_latent_sample(str(tmp_path / "b"))
    assert all(filecmp.cmp(a, b, shallow=False) for a, b in zip(paths, again, strict=True))


# --- the examples, run as a user runs them, on small data they make -------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env() -> dict:
    """This tree's readers and beam_jobs first on the path (PYTHONPATH: an editable
    install may point elsewhere)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]))


def _run(*argv: str, cwd, ok: bool = True) -> subprocess.CompletedProcess:
    """An example as a user runs it (`python examples/x.py ...`, `torchrun ...`), in its
    own process, importing this tree's readers and beam_jobs."""
    result = subprocess.run([sys.executable, *map(str, argv)], capture_output=True,
                            text=True, cwd=cwd, env=_env(), stdin=subprocess.DEVNULL,
                            timeout=600)
    if ok:
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result


def _killed(*argv: str, cwd) -> None:
    """An example run as `_run` runs it that kills itself (`--stop_after_...`), in a
    session of its own, its output in a file (not a pipe, which a process left behind
    would hold open): once it is dead, every process of its session ends too."""
    with open(os.path.join(cwd, "killed.out"), "w") as out:
        example = subprocess.Popen([sys.executable, *map(str, argv)], stdout=out,
                                   stderr=subprocess.STDOUT, cwd=cwd, env=_env(),
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        status = example.wait(timeout=600)
    with open(os.path.join(cwd, "killed.out")) as f:
        assert status != 0, f.read()[-4000:]
    assert_session_ends(example.pid)


def _steps(log_dir, rank: int) -> list[dict]:
    with open(os.path.join(log_dir, f"rank{rank}.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def latents(tmp_path_factory) -> str:
    """57 windows of 20 latents (8 videos of the sample's kind): an odd number, so that
    two ranks leave one out an epoch, and 28 a rank, which batches of 5 do not divide."""
    root = tmp_path_factory.mktemp("latents")
    out = example_module("example_data").latent_dataset(str(root), videos=8, frames=(60, 100),
                                                  window=20, stride=10)
    assert_verified(out)
    assert load_spec(out).splits["train"].windows == 57
    return out


GPT = [os.path.join(EXAMPLES, "latent_gpt_torch.py"), "--epochs", "2", "--batch_size", "5",
       "--clip", "8", "--width", "32", "--layers", "1", "--lr", "1e-2", "--seed", "0"]
TORCHRUN = ["-m", "torch.distributed.run", "--nproc_per_node", "2"]


@pytest.fixture(scope="module")
def gpt_run(latents, tmp_path_factory) -> str:
    """The GPT on 2 processes (DDP, gloo), never stopped: its step logs' folder."""
    root = tmp_path_factory.mktemp("gpt")
    _run(*TORCHRUN, *GPT, "--data", latents, "--log_dir", root / "logs", cwd=root)
    return str(root / "logs")


@pytest.mark.slow
def test_the_gpt_on_two_processes_sees_every_window_once_an_epoch_and_learns(latents, gpt_run):
    """Each epoch the two ranks' batches hold every window at most once, and all of them
    but the split's `len % 2` leftover (what the example documents: with
    drop_remainder=False nothing else is left out, a short last batch included); both
    ranks take the same steps and log the same loss, whose last value is under half
    its first."""
    windows = load_spec(latents).splits["train"].windows
    ranks = [_steps(gpt_run, rank) for rank in (0, 1)]
    assert [len(steps) for steps in ranks] == [12, 12]      # 2 epochs of ceil(28 / 5)
    for epoch in (0, 1):
        seen = [w for steps in ranks for s in steps if s["epoch"] == epoch
                for w in s["windows"]]
        assert len(seen) == len(set(seen)) == windows - windows % 2
        assert set(seen) <= set(range(windows))
    assert [s["loss"] for s in ranks[0]] == [s["loss"] for s in ranks[1]]
    losses = [s["loss"] for s in ranks[0]]
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.slow
def test_the_gpt_killed_then_resumed_gets_the_batches_of_a_run_never_stopped(
        latents, gpt_run, tmp_path):
    """Both ranks are SIGKILLed right after step 8's checkpoint (mid-epoch 1); the same
    command then resumes from each rank's checkpoint and logs, from step 9 on, the
    batches and the losses of the run never stopped (and reads with no worker
    process where that one had one: the batches do not depend on it)."""
    command = [*TORCHRUN, *GPT, "--data", latents, "--checkpoint", tmp_path / "ckpt"]
    killed = _run(*command, "--stop_after_step", "8", "--workers", "0",
                  "--log_dir", tmp_path / "killed", cwd=tmp_path, ok=False)
    assert killed.returncode != 0
    assert sorted(os.listdir(tmp_path / "ckpt"))[-2:] == ["rank1-step6.pt", "rank1-step8.pt"]
    assert [s["step"] for s in _steps(tmp_path / "killed", 0)] == list(range(1, 9))
    resumed = _run(*command, "--log_dir", tmp_path / "resumed", cwd=tmp_path)
    assert "resumed from step 8 (epoch 1, batch 2 of 6)" in resumed.stdout
    for rank in (0, 1):
        never_stopped = [s for s in _steps(gpt_run, rank) if s["step"] > 8]
        assert _steps(tmp_path / "resumed", rank) == never_stopped


@pytest.mark.slow
def test_a_killed_gpt_takes_its_dataloader_worker_and_forkserver_along(latents, tmp_path):
    """One process (no torchrun, which kills its ranks' process groups), SIGKILLed by
    its own --stop_after_step: its DataLoader worker and the forkserver that made it
    end too, where they once ran on for good, holding the output pipe."""
    _killed(*GPT, "--data", latents, "--stop_after_step", "1", "--checkpoint",
            tmp_path / "ckpt", cwd=tmp_path)


def _final(stdout: str) -> dict[str, float]:
    """The figures of an example's last line: 'final loss X ...; validation RMSE Y (...
    their std in train Z)'."""
    line = stdout.strip().splitlines()[-1]
    figures = {"final": r"final loss ([\d.]+)", "rmse": r"validation RMSE ([\d.]+)",
               "std": r"their std in train ([\d.]+)"}
    found = {name: re.search(pattern, line) for name, pattern in figures.items()}
    assert all(found.values()), line
    return {name: float(match.group(1)) for name, match in found.items()}


@pytest.fixture(scope="module")
def fires(fire_sample) -> str:
    """The examples' small synthetic fires (with missing frames: masks 0), as the fire
    examples make them without --data (conftest's, built once a session)."""
    assert_verified(fire_sample)
    spec = load_spec(fire_sample)
    assert spec.splits["train"].bad_frames > 0 and spec.stats["train"]["labels"].count > 0
    return fire_sample


def test_the_torch_fire_regressor_learns_from_normalised_labels(fires, tmp_path):
    """Three epochs of batches of 8, two DataLoader workers (the normalising transform
    runs there): the last step's loss under a tenth of the first epoch's first, and on
    the validation split an error in kW under a fifth of the labels' spread."""
    result = _run(os.path.join(EXAMPLES, "fire_regressor_torch.py"), "--data", fires,
                  "--epochs", "3", "--batch_size", "8", "--seed", "0", cwd=tmp_path)
    first = float(re.search(r"epoch 0 steps \d+ first loss ([\d.]+)", result.stdout).group(1))
    figures = _final(result.stdout)
    assert figures["final"] < 0.1 * first, result.stdout
    assert figures["rmse"] < 0.2 * figures["std"], result.stdout


@pytest.mark.slow
def test_the_keras_fire_regressor_makes_its_data_learns_and_resumes_an_epoch(tmp_path):
    """Run as it stands, with no --data: it makes its fires (a dataset that verifies),
    is killed after epoch 2's backup, and the same command resumes at epoch 3 and says
    so (not "first epoch"); its last epoch's mean loss is under a fifth of epoch 1's, and
    its validation error in kW under a fifth of the labels' spread."""
    command = [os.path.join(EXAMPLES, "fire_regressor_keras.py"), "--epochs", "3",
               "--workdir", tmp_path / "fire", "--seed", "0", "--checkpoint", tmp_path / "ck"]
    killed = _run(*command, "--stop_after_epoch", "2", cwd=tmp_path, ok=False)
    assert killed.returncode == -9, (killed.stdout + killed.stderr)[-3000:]
    assert_verified(tmp_path / "fire" / "dataset")
    first = float(re.search(r"loss: ([\d.]+)", killed.stdout).group(1))   # epoch 1's
    resumed = _run(*command, cwd=tmp_path)
    assert re.search(r"after 3 epochs of \d+ steps \(resumed at epoch 3: [\d.]+\)",
                     resumed.stdout), resumed.stdout
    figures = _final(resumed.stdout)
    assert figures["final"] < 0.2 * first, (killed.stdout, resumed.stdout)
    assert figures["rmse"] < 0.2 * figures["std"], resumed.stdout


# --- what the examples refuse, in one line ---------------------------------------------

@pytest.fixture(scope="module")
def small_kinds(tmp_path_factory) -> dict[str, str]:
    """Latent windows [4, 3] and png windows [4, 24, 32, 3] with two labels a frame
    (format_datasets: numpy only, no job run)."""
    root, videos = tmp_path_factory.mktemp("kinds"), kind_videos()
    return {name: write_kind(str(root / name), name, videos) for name in ("latent", "png")}


def _refusal(name: str, argv: list, capsys) -> str:
    """examples/NAME.py run on `argv` in this process (in the test's folder: one that
    does not refuse makes its data there) until it refuses: exit status 2 and one line
    saying why, no traceback. That line."""
    module = example_module(name)
    with pytest.raises(SystemExit) as refused:
        module.train(module.parse_args([str(a) for a in argv]))
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "Traceback" not in err, err[-3000:]
    return err.strip().splitlines()[-1]


REFUSALS = [   # (example, its arguments, what its line says); "{...}": a dataset
    ("latent_gpt_torch", ["--data", "{missing}"], "is not a finished dataset"),
    ("latent_gpt_torch", ["--data", "{fires}"],
     "its windows are pixels [8, 32, 48, 3]; this example reads latent windows [L, C]"),
    ("latent_gpt_torch", ["--data", "{latent}", "--clip", "4"],
     "--clip 4: the model reads a clip of 5 frames, more than the dataset's windows hold (4)"),
    ("latent_gpt_torch", ["--data", "{latent}", "--split", "validation"],
     "it has no windows in split 'validation' (its splits: train 98, test 17, empty 0)"),
    ("latent_gpt_torch", ["--clip", "0"], "argument --clip: must be a whole number >= 1, got 0"),
    ("latent_gpt_torch", ["--epochs", "-1"], "argument --epochs: must be a whole number >= 1"),
    ("latent_gpt_torch", ["--heads", "3"], "argument --heads: must divide --width (64), got 3"),
    ("latent_gpt_torch", ["--lr", "nan"], "argument --lr: must be a number > 0, got nan"),
    ("fire_regressor_torch", ["--data", "{latent}"],
     "its windows are latents [4, 3]; this example reads pixel windows [L, H, W, C]"),
    ("fire_regressor_torch", ["--data", "{png}"], "its labels are [4, 2] a window"),
    ("fire_regressor_torch", ["--data", "{fires}", "--batch_size", "1000"],
     "--batch_size 1000: more than the"),
    ("fire_regressor_torch", ["--workers", "-1"], "argument --workers: must be a whole number"),
    ("fire_regressor_keras", ["--epochs", "0"], "argument --epochs: must be a whole number >= 1"),
    ("fire_regressor_keras", ["--data", "{latent}"], "its windows are latents [4, 3]"),
    ("fire_regressor_keras", ["--epochs", "2", "--stop_after_epoch", "2"],
     "argument --stop_after_epoch: must be less than --epochs (2), got 2"),
]


@pytest.mark.parametrize("name, argv, said", REFUSALS,
                         ids=[f"{name}:{' '.join(argv)}" for name, argv, _ in REFUSALS])
def test_each_example_refuses_a_wrong_argument_or_dataset_in_one_line(
        name, argv, said, fires, small_kinds, tmp_path, monkeypatch, capsys):
    """Before it reads anything: a mistake was a traceback from deep in the loop (a torch
    dtype error, `KeyError: 'labels'`, Keras's `KeyError: 'loss'` after 0 epochs), or a
    run that did nothing and exited 0 (`--epochs -1`), or trained on empty clips
    (`--clip 0`: loss 0.0000)."""
    monkeypatch.chdir(tmp_path)
    datasets = {"fires": fires, "missing": tmp_path / "nothing", **small_kinds}
    line = _refusal(name, [a.format(**datasets) for a in argv], capsys)
    assert "error: " in line and said in line, line


def test_the_torch_fire_regressor_validates_in_batches_of_its_batch_size(
        fires, monkeypatch, capsys):
    """Every batch its model sees holds --batch_size windows or fewer, validation's too
    (which once read 64 whatever --batch_size was: at 540x960 frames, windows of 32,
    --batch_size 2 peaked at 7.3 GB where 3.9 GB is its own)."""
    module = example_module("fire_regressor_torch")
    seen = []

    class Recording(module.Regressor):
        def forward(self, frames):
            seen.append(len(frames))
            return super().forward(frames)

    monkeypatch.setattr(module, "Regressor", Recording)
    module.train(module.parse_args(["--data", fires, "--batch_size", "3", "--epochs", "1",
                                    "--steps", "2", "--workers", "0"]))
    assert "validation RMSE" in capsys.readouterr().out
    assert len(seen) > 2 and max(seen) == 3, seen
