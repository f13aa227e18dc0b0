"""The features, on arrays: persistent homology (``homology``), spectral geometry
(``spectral``), neural persistence and weight-row homology (``weights``) and the
topology of a loss surface (``landscape``). NumPy and SciPy; no files, no models.
"""
