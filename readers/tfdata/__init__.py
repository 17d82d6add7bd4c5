"""The tf.data reader: `make_dataset` (dataset.py) and `mix_datasets` (mixed_dataset.py),
which `readers` exports, importing TensorFlow on their first use; the tf.data internals
they build on (tf_internals.py), an iterator's checkpoint that names its dataset
(checkpoints.py), and the allocator's settings for their batches (malloc.py).

Nothing is imported here: `readers.make_dataset` is the way in.
"""
