"""`make demo`: an offline tour of Feather (see demo/run.py)."""
