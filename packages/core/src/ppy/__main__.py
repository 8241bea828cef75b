"""``python -m ppy``: the same as the ``ppy`` command."""

from ppy.cli.main import main

raise SystemExit(main())
