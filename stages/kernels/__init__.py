"""Pure-array kernels under the stages: they take numpy arrays and return numpy arrays.

Nothing here imports the rest of ``stages`` (no `Frame`, no registry), so the frame model and every stage
can build on them without import cycles:

* `buckets` — bounds and the stable counting sort every grid is built with;
* `grid_knn` — exact k nearest neighbours on uniform grids (sequential deletions, whole-shape kNN);
* `column_knn` — exact k nearest neighbours of queries next to the data (upsampling's intensity);
* `neighbours` — KD-tree queries in a cache-friendly order;
* `boxes` — points in oriented boxes; `box_unit` — Li et al.'s box-normalised object frame;
* `spherical` — range / azimuth / elevation and moves along a point's ray;
* `beams` — the snowfall simulator's loops over beams: flakes in each wedge, occlusion shares, waveform peaks.
"""
