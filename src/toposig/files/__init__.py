"""Files on disk, the lowest layer: atomic writes and validated reads (``atomic``), names
that become folders (``names``), advisory locks (``locks``) and content fingerprints of
checkpoints (``content_hash``).
"""
