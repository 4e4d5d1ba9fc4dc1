"""``python -m herald_cli``: the ``herald`` command line, from whichever checkout is the cwd."""

from herald_cli.commands import main

main()
