"""The README's sample and the runnable examples (examples/): the sample has structure a
model can learn, and each example, run as a user runs it, learns (its loss falls), the
DDP one sees every window once an epoch, and a killed run resumes with the batches it
would have had."""
import filecmp

import numpy as np
import tensorflow as tf

from beam_jobs.sample import write_latent_sample


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
    assert all(filecmp.cmp(a, b, shallow=False) for a, b in zip(paths, again))
