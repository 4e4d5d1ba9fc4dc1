"""Herald's public contracts: what other teams and tools depend on, byte for byte.

``http.py`` holds the bodies of the ``/v1`` HTTP API (served by ``services/api``, taken by the use
cases that the routes call). They are data over the domain's types, with no I/O; changing one
changes the API.
"""
