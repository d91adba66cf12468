"""Benchmarks behind ``autoshard bench NAME``.

Each writes CSVs under results/ that state the command and the machine that made them.
"""
