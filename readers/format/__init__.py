"""The shard format, in one place, numpy only: the job writes it, both readers read it.

- `names`: the names of a dataset's files (dataset.json, sidecars, shards, indexes).
- `locations`: whether a path is on this machine or on a store (`is_remote`).
- `numbers`: whole numbers as the readers and the command lines take them, checked in
  the same words (`whole_number`, `whole_number_type`).
- `versions`: the format version the job writes, those a reader reads, and what each
  changed.
- `windows`: a dataset's windows (`Window`) and where they start in T frames.
- `keys`: stable hashes: a video's split, a window's sort key in its split's shards.
- `features`: a window example's features (`FeatureSpec`, `window_features`).
- `spec`: dataset.json: DatasetSpec, written and read back, `load_spec`, `SpecError`.
- `spec_checks`: dataset.json's values checked before a reader trusts them.
- `dataset_json`: dataset.json built, a run's and an `--append`'s.
- `channel_stats`: the dataset's statistics per split, feature and channel
  (`ChannelStats`, `DatasetSpec.stats`): exact, mergeable, and how to normalise with them.
- `moments`, `frame_stats`: the sums for the statistics, a video's (each stored frame
  once) and a split's (added exactly, in any order).
- `generations`: the runs that added a dataset's windows (`--append`), as dataset.json
  lists them.
- `json_checks`: reading dataset.json's values with a one-line reason for each wrong one.
- `codecs`: one codec per feature encoding: its wire bytes and how readers read them.
- `wire`: the protobuf wire format of a tf.train.Example: its fields, and find each feature.
- `tfrecord`: TFRecord framing: length header, masked CRCs, reading a frame.
- `index`: the offset index beside an uncompressed shard.
- `window_table`: the window table beside a shard: each record's video and valid frames,
  what a reader selects by.
- `writer`: how windows become a dataset's bytes, the job's and a plain writer's one core:
  a window's values and its example (`ExampleEncoder`), records, a shard's side files
  and its `Shard`, a plain writer's shards.
- `tfds_info`: dataset_info.json (features.json before format 5), what TensorFlow
  Datasets reads.
- `videos_file`: a dataset's videos file checked against its dataset.json.
- `video_rows`: what a video's row of the videos file holds of its metadata and of its
  manifest row's own fields, bounded (`MAX_METADATA`, `MAX_FIELDS`).

Neither TensorFlow nor Apache Beam is imported here: the Beam job checks its flags and
output directory against these names before it imports TensorFlow (whose import logs
lines of its own), and readers.numpy reads without either. A codec imports TensorFlow
inside its tf.data methods only.
"""
from readers.format import (  # noqa: F401 (submodules)
    codecs,
    index,
    tfds_info,
    tfrecord,
    video_rows,
    videos_file,
    window_table,
    wire,
)
from readers.format.channel_stats import ChannelStats  # noqa: F401
from readers.format.encodings import CODECS, ENCODINGS, IMAGE_ENCODINGS, Codec  # noqa: F401
from readers.format.features import PER_FRAME, FeatureSpec, window_features  # noqa: F401
from readers.format.generations import Generation, generations_of  # noqa: F401
from readers.format.locations import is_remote  # noqa: F401
from readers.format.names import (  # noqa: F401
    BAD_FRAMES_JSONL,
    COMPRESSIONS,
    DATASET_INFO_JSON,
    DATASET_JSON,
    FAILURES_JSONL,
    FEATURES_JSON,
    INDEX_SUFFIX,
    MAX_SHARDS,
    RUN_ID,
    SIDECAR_KINDS,
    SIDECARS,
    TABLE_SUFFIX,
    TFDS_FILES,
    VIDEOS_JSONL,
    index_name,
    is_dataset_file,
    is_index_name,
    is_shard_name,
    is_table_name,
    run_id_in,
    run_id_of,
    shard_name,
    sidecar_name,
    table_name,
    tf_compression_type,
)
from readers.format.spec import (  # noqa: F401
    MASK_MEANING,
    DatasetSpec,
    Shard,
    SpecError,
    SplitInfo,
    load_spec,
)
from readers.format.versions import FORMAT_VERSION, READABLE_VERSIONS  # noqa: F401
from readers.format.windows import Window  # noqa: F401
from readers.format.wire import Layout, layout  # noqa: F401
from readers.format.writer import ExampleEncoder, encode_example  # noqa: F401
