"""OR-Tools backends over one shared formulation (``formulation.py``)."""
