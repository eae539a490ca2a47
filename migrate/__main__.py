"""``python -m migrate`` runs the vrmig CLI."""

import sys

from migrate.cli import main

sys.exit(main())
