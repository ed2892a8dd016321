"""The published tables: their rows, the runner that trains them and the pages it writes."""
