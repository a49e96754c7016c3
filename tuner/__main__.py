"""``python -m tuner`` runs the ``tune`` command line."""

from .cli import main

main()
