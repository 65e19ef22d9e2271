"""Building the book: save, regenerate, reader notebooks, and the render helpers."""
