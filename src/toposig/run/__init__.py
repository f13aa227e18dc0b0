"""Running a study: the plan (``plan``), per-checkpoint tasks (``tasks``), executors
(``executors``), the driver (``pipeline``), the records on disk (``store``) and the one
study a results folder holds (``study``).
"""
