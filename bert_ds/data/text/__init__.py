"""Records -> documents of sentences: record layouts (layouts.py), cleaning and paragraphs
(cleaning.py), sentence splitters (splitters.py)."""
