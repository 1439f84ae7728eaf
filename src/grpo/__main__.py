"""`python -m grpo ...` (and `torchrun -m grpo ...`) runs the command line."""

import sys

from grpo.cli import main

sys.exit(main())
