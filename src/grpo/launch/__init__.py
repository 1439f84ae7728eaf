"""Launchers that start the trainer ranks somewhere other than this process (torchrun needs none)."""
