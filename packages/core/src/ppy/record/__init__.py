"""Recorded signatures: ``ppy record`` writes down what a real run calls, and
the build stages exactly that where the source describes nothing.

``observe`` watches the calls of a run, ``format`` is the file's format
and the record it is read into, ``signatures`` the file
(``.ppy/signatures.json``: read, checked, written), ``generalise``
turns a function's recorded calls into one description, and ``apply`` hands
that description to the build. docs/recording.md has the design. Nothing is
imported here.
"""
