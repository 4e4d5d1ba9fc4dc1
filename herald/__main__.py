"""``python -m herald``: the ``herald`` command line, from whichever checkout is the cwd."""

from herald.cli import main

main()
