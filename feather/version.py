"""The running code's version, shown on /health: pyproject.toml's `version`, read from the installed
package's metadata so the number lives in one place.

Its own module so that feather/health.py need not import the package that wires it
(feather/__init__.py imports health): no cycle between the app factory and its blueprints.
"""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("feather")
except PackageNotFoundError:  # run from a checkout that was never installed (`pip install -e .`)
    __version__ = "0+unknown"
