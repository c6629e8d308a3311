"""The operators' CLI (``effectgate ...``): the one entry point that mounts every other door,
``simulate`` and ``bench``.
"""
