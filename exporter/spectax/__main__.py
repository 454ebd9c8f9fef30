"""`python -m spectax` is the `spectax` command."""

import sys

from spectax.cli.main import main

sys.exit(main())
