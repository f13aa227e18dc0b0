"""Statistics over the records: correlations and their controls (``stats``,
``controls``), phases, scaling and prediction, everything ``statistics.json`` holds
(``statistics``) and the results as one table (``table``).
"""
