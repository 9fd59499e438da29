"""Chapter 8, your training loop (``book/training_loop.md``): what else changes from one GPU
when the loop runs under DDP: evaluation, clipping, mixed precision, activation checkpointing,
seeds, early stopping, logging."""
