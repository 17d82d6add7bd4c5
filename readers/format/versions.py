"""The format's versions: the one the job writes, those a reader reads, and what each
changed."""

FORMAT_VERSION = 7
# 2 added how features are stored, and the sidecars; 3 made the offset index text
# (readers.format.index), which a reader of 1 and 2 would take for binary offsets; 4 added
# generations (`--append`): a split's shards may be of several runs, which a reader of 3
# would refuse as another dataset's; 5 names the sidecars by the run that committed them
# (`videos-RUNID.jsonl`, dataset.json's `videos_file` ...), so that one move of
# dataset.json commits them too, and puts TFDS's features inside dataset_info.json; 6 adds
# a window table beside each shard (readers.format.window_table), listed in `files`, whose
# names a reader of 5 would refuse as no file of a dataset's; 7 makes each table name its
# shard, gives its CRC in dataset.json (`table_crc32c`) and each generation's format, which
# a reader of 6 would refuse as no table of its kind, and gives each row of the videos
# file the video's `metadata` and its manifest row's own `fields` (readers.format.video_rows:
# rows of earlier formats lack both, and a reader of 6 ignores them)
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7)
