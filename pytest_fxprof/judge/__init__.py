"""Judge: measurements become decisions and advice.

- ``decision``: the gate's rules: a profile against its baseline, node by node, per aggregate and in total,
  each verdict with its reason (the verdict records are ``records.verdicts``);
- ``paired``: the rule against a revision: old and new side measured in pairs, judged by their ratios per pair;
- ``aggregates``: what both rules judge together (operator types, module subtrees at every depth, repeated blocks
  by pattern and class), over both sides of a changed graph, and how strictly each level is tested;
- ``band``: one band for both rules, and what set it; ``noise``: the gate's speed factors and spreads;
  ``weak``: a baseline too noisy to catch a large node's slowdown; ``outliers``: pairs that met two machines;
- ``moved``: how two graphs' nodes pair, and lines that swapped places; ``memory``: what memory a change costs;
- ``blame``: what a failure leads with: the smallest slower module that holds most of the extra time;
- ``hints``: where to look for speed in one profile; advice, never a failure.

Pure: every rule can be tested with hand-built numbers.

Must not import torch, pytest or pandas.
"""
