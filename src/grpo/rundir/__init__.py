"""The run directory: checkpoints and the files a run leaves behind."""
