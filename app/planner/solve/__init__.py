"""Where everything goes: the plan and its alternatives (``plan.py``), the per-device stacks, the
layer split across devices, and the price of a placement."""
