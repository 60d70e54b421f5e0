"""The running code's version, shown on /health.

Its own module so that feather/health.py need not import the package that wires it
(feather/__init__.py imports health): no cycle between the app factory and its blueprints.
The same number as `version` in pyproject.toml (the package metadata).
"""
__version__ = "0.1.0"
