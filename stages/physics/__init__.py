"""Physics helpers of the weather stages, not stages themselves: LISA's Mie extinction and sampling
(`lisa`), Hahner et al.'s snowfall simulator (`snowfall`: particle field, occlusion, received power),
ground-plane fitting and noise floor (`ground`), the HDL-64E S3 per-laser calibration (`hdl64e_s3`).
See stages/weather/README.md for the models and their sources."""
