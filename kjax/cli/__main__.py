"""`python -m kjax.cli ...`: the same as the `kjax` command."""
import sys

from kjax.cli import main

sys.exit(main())
