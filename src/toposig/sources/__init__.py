"""Where inputs come from: the analysed texts (``corpus``), revision names
(``revisions``), checkpoint series and their models (``checkpoints``), plain checkpoint
files (``checkpoint_files``) and Hub downloads (``fetch``).
"""
