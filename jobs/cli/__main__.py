"""`python -m jobs.cli`: the same as the `webqa` console script."""

import sys

from jobs.cli.app import main

if __name__ == "__main__":
    sys.exit(main())
