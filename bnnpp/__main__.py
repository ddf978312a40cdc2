"""``python -m bnnpp`` runs the command line."""

import sys

try:
    from bnnpp.cli import main
except KeyboardInterrupt:  # Ctrl-C while the package loads: one line, as main() says it
    sys.stderr.write("bnnpp: interrupted\n")
    sys.exit(130)

sys.exit(main())
