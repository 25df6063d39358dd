"""What each memory part takes, computed from the model shape and the launch settings: the KV cache,
the weights and their repacked copy, the compute buffers, LoRA adapters and draft models, the vision
projector."""
