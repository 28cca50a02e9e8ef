"""The envelope of a policy document: its ``"format"`` tag.

Shared by the reader (:mod:`.document`, which checks the tag before any schema work) and the
schema (:mod:`.schema`, whose ``format`` field defaults to it); light, so neither imports the other
to get it.
"""

#: The only policy format this release understands.
FORMAT = "pask-policy/1"
SUPPORTED_FORMATS = (FORMAT,)
