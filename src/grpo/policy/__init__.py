"""The policy side: the model, its optimizer, the update, and saving and loading its state."""
