"""``python -m ppy``: the same as the ``ppy`` command."""

from ppy.cli import main

raise SystemExit(main())
