"""Store: what the plugin keeps on disk.

- ``baseline``: the baseline file format (its schema version, validation and errors) and the directory that
  holds one file per test;
- ``files``: writing any file whole or not at all, and the one JSON encoding every file uses.

Must not import torch, pytest or pandas.
"""
