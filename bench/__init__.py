"""Benchmarks that back Herald's performance claims with numbers measured on the machine at hand.

Each bench is a module run with ``python -m bench.<name>``; see ``bench/README.md``.
"""
