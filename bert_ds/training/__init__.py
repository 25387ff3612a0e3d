"""The pre-training loop's helpers: metrics logging (console, JSON Lines, TensorBoard) and FLOP accounting."""
