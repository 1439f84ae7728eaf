"""The rollout side: engines that generate completions, and the collector that turns them into groups."""
