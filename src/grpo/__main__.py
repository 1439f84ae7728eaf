"""`python -m grpo ...` (and `torchrun -m grpo ...`) runs the command line."""

from grpo.cli import console

console()
