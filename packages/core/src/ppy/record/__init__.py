"""Recorded signatures: ``ppy record`` writes down what a real run calls, and
the build stages exactly that where the source describes nothing.

``observe`` watches the calls of a run, ``signatures`` is the file
(``.ppy/signatures.json``: read, checked, merged, written), ``generalise``
turns a function's recorded calls into one description, and ``apply`` hands
that description to the build. docs/recording.md has the design. Nothing is
imported here.
"""
