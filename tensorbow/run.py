"""`python -m tensorbow.run`: the module entry point of `tensorbow-run`.

The command line lives in `tensorbow/cli/` (main.py); this module only
runs it, for callers without the installed command, and for the workers
`tensorbow-run --workers` starts.
"""
import sys

from tensorbow.cli.main import main

__all__ = ["main"]

if __name__ == "__main__":
  sys.exit(main())
