"""`python -m lmpipe.cli ...`: the `lmpipe` command."""

import sys

from lmpipe.cli.main import main

sys.exit(main())
