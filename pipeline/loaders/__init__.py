"""PyTorch datasets over a built version (local, ``file://`` or ``s3://``, read in place).

    from torch.utils.data import DataLoader
    from bench_build.loaders import PointCloudDataset, PointCloudIterableDataset, collate_point_clouds

    ds = PointCloudDataset("bench-out/kitti-c/1.0.0", corruption="fog", severity=3)       # map-style
    it = PointCloudIterableDataset("s3://bench/datasets/kitti-c/1.0.0", severity=[0, 5])  # streaming
    for batch in DataLoader(it, batch_size=8, num_workers=2, collate_fn=collate_point_clouds): ...

Both are filterable by corruption, severity, split (the ``split`` column of object benchmarks) and frame; a
value the version does not have, or a split none of the selected frames is in, is a `NotInVersion` naming what
there is, never an empty dataset; so is a partition a partial pull (``bench-build pull --corruption …``) does not
hold, naming what it holds and the pull that adds it. They yield one dict per example with writable NumPy arrays
(``torch.from_numpy`` shares them, no warning):

| key | value |
| --- | --- |
| ``key``, ``frame_id``, ``corruption``, ``severity`` | identity of the example |
| ``points`` | (N, C) float32, columns ``fields`` (the manifest's) |
| ``point_tag`` | (N,) uint8 |
| ``gt_boxes`` | (M, 7) float32, OpenPCDet ``gt_boxes_lidar``: x, y, z (centre), dx, dy, dz, heading; no DontCare |
| ``gt_names`` | (M,) str class names of those boxes |
| optional per-point columns | e.g. ``semantic`` (N,) uint32, ``sigma``/``mu`` (N,) float32, when the example has them |
| optional per-example columns | e.g. ``class_name``, ``class_id``, ``known`` (None where unknown) |

Both verify what they read unless ``verify=False``: each file against its manifest entry on open (size, rows;
on ``s3://`` the sha256 recorded at upload) and each data page against its checksum, raising
`IntegrityError` naming the file (see `format.reader.Version`). ``verify=False`` is for trusted
fast paths (a local copy ``bench-build verify`` just checked); changed bytes then decode silently.

`PointCloudDataset` builds its index of (file, row) from the manifest alone (rows per file, and the frame of
each row from ``shard_frames``): no scan of the data. A read decodes the row group holding the row and keeps
the last one, so sequential or batched access costs one row-group read per 8 examples; random access reads a
row group per example (prefer the iterable dataset for full passes).

`PointCloudIterableDataset` splits the selected files over distributed ranks (``torch.distributed`` when it
is initialised, or ``rank``/``world_size``) and then over DataLoader workers (``get_worker_info()``): each
example is yielded by exactly one worker of one rank. ``shuffle=True`` permutes the files (same permutation
in every worker, from ``seed`` + ``set_epoch``) and mixes examples through a ``shuffle_buffer``-example buffer
(bounded memory, like webdataset's shuffle). Call ``set_epoch(e)`` before each epoch's ``iter(loader)``: the
epoch is held in shared memory, so it reaches DataLoader workers that outlive an epoch
(``persistent_workers=True``), which keep their own copy of the dataset otherwise.
"""

from bench_build.format.remote_fs import s3_filesystem
from bench_build.loaders.collate import collate_point_clouds
from bench_build.loaders.common import example_dict, select_rows
from bench_build.loaders.iterable import PointCloudIterableDataset
from bench_build.loaders.map_style import PointCloudDataset

__all__ = ["PointCloudDataset", "PointCloudIterableDataset", "collate_point_clouds", "example_dict",
           "s3_filesystem", "select_rows"]
