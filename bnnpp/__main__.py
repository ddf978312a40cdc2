"""``python -m bnnpp`` runs the command line."""

import sys

from bnnpp.cli import main

sys.exit(main())
