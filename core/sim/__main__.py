"""``python -m turnout.sim``: same as ``turnout sim``."""

from turnout.sim.cli import main

raise SystemExit(main())
