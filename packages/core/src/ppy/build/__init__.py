"""``ppy build``: discovery, policy, staging and the artifact, and whether an artifact is current.

This ``__init__`` imports nothing, so the room costs nothing until one of its
modules is used.
"""
