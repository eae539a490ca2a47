"""Infrastructure of every run: errors, atomic writes, processes, the resource registry, signals,
units, meta.json.  Imports nothing else of migrate."""
