"""``python -m pytest_fxprof.cli``: the ``fxprof`` command."""

from pytest_fxprof.cli import main

raise SystemExit(main())
