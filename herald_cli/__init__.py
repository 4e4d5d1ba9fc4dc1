"""``herald``, the operator's command line: a client of the HTTP API and nothing else.

It imports nothing of the ``herald`` package; it speaks the ``/v1`` API over HTTP, as any other
client does (``commands.py``).
"""
