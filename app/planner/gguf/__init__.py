"""Reading a GGUF: the bounded header reader (its only file access), llama.cpp's loader rules, and
the model shape the planner computes with."""
