"""What describes a dataset: benchmark recipes (TOML package data), the manifest schema, and
reading, writing and verifying manifests."""
