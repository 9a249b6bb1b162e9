"""`python -m verl_migrate` runs the `verl-migrate-config` command."""

import sys

from verl_migrate.cli import main

if __name__ == "__main__":
    sys.exit(main())
