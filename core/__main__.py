"""``python -m turnout`` runs the ``turnout`` command."""

from turnout.cli import main

raise SystemExit(main())
