"""Store: what the plugin keeps on disk.

- ``baseline``: a baseline file, read and checked whole, its errors, and the directory of one file per test;
- ``schema``: the file's JSON shapes and version; ``validation``: reading it back, field by field, checked;
- ``history``: an entry's earlier recordings; ``files``: writing files whole, in one JSON encoding.

Must not import torch, pytest or pandas.
"""
