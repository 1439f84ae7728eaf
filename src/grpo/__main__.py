"""`python -m grpo ...` (and `torchrun -m grpo ...`) runs the command line."""

import sys

try:
    from grpo.cli import console
except KeyboardInterrupt:  # Ctrl-C while the command line's own modules load
    from grpo.errors import EXIT_INTERRUPTED, START_INTERRUPTED

    print(START_INTERRUPTED, file=sys.stderr)
    sys.exit(EXIT_INTERRUPTED)

console()
