"""`python -m spectax` is the `spectax` command."""

import sys

from spectax.cli import main

sys.exit(main())
