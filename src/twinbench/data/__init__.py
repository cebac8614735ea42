"""Data with no download: an embedded synthetic corpus, a user's text file, deterministic batches."""
