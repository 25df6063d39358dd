"""Pass 1: llama.cpp's own allocator with nothing resident (``no_alloc``), in a child process.

May import the planner (the data type of a measurement, ``app.planner.measurement``, lives there) and
the engine (where the libllama and the engine build are); the planner imports nothing from here.
"""
