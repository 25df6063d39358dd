"""Pure-Python planning: GGUF shape, memory math, measurements, devices. No Qt, no network."""
