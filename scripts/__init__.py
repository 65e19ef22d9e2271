"""Maintenance scripts for the book; run them as modules, e.g. `python -m scripts.build.save`."""
