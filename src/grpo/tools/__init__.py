"""Read-only tools that look at a run or a config without training: `doctor`, `report`, `health`,
`plan`, `export`."""
