"""Bridges from other frameworks into svod_min plans.

Each bridge is used on a development machine that has the other framework
installed; what it writes (a plan file, kernel sources and ``.npy`` data) runs
with svod_min alone. Importing this package imports no framework.
"""
