"""Turning records into something a person reads: terminal tables, Markdown, break-even lines."""
