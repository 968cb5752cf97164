"""`python -m autoscaler`: the same entry point as the `autoscaler` console script."""

import sys

from autoscaler import cli

sys.exit(cli.main())
