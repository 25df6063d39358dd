"""One module per ``headroom`` subcommand; each has ``register(subparsers)``."""
