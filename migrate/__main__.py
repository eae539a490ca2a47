"""``python -m migrate`` runs the vrmig CLI."""

import sys

from migrate.cli.main import main

sys.exit(main())
