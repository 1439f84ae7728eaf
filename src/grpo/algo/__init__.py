"""The algorithm as pure functions: group advantages, the clipped policy loss and KL estimators."""
