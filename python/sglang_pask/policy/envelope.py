"""The envelope of a policy document: its ``"format"`` tag.

Shared by the reader (:mod:`.document`, which checks the tag before any schema work) and the
schema (:mod:`.schema`, whose ``format`` field defaults to it); light, so neither imports the other
to get it.

* ``pask-policy/2`` (written by this release): the table plus the ``operating_point`` it was
  calibrated under (:mod:`.operating_point`).
* ``pask-policy/1``: the table only; still read, with one warning line, and run at today's
  engine defaults (``continuous`` schedule, interval 1, no shared segment).
"""

#: The policy format this release writes.
FORMAT = "pask-policy/2"
#: Formats this release reads; the old ones carry no operating point.
OLD_FORMATS = ("pask-policy/1",)
SUPPORTED_FORMATS = (FORMAT,) + OLD_FORMATS
