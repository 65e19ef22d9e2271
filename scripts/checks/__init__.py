"""Checking the book: its sources, its rendered pages, and its speed."""
