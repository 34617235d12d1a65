"""The compiler driver's parts: probing (probe), one source (run), many sources (batch).

Import the public names from :mod:`svod_min.compiler.clang`.
"""
