"""Views: the same per-profile records shown in every form a user reads.

- ``render``: the text of tables, failure messages and summary lines (``item_lines``: each compared item's line);
- ``report``: the JSON report (``--fxprof-report``), the record every other view of a run reads (``judged_json``:
  each judged item's part of it);
- ``terminal``: the terminal summary's lines, the run's and each profile's, coloured by verdict;
- ``html`` (with ``html_format``, ``html_tree``, ``assets/report.css`` and ``assets/report.js``), ``markdown``,
  ``trace``, ``benchjson``: the report files of ``--fxprof-html``, ``--fxprof-markdown``, ``--fxprof-trace`` and
  ``--fxprof-benchmark-json``;
- ``frames``: the rows of every DataFrame, and JSON reports read back;
- ``outputs``: which file each option writes, and the properties each test carries on its pytest report.

Views decide nothing: they read records and the verdicts the judge made, and write files only through
``store.files``.

Must not import torch. Must not import pytest or pandas at module level.
"""
