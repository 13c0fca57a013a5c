"""The composition root: settings in, a wired process out.

Nothing here connects at import time or reads the environment: each CLI command loads
the settings and calls these builders once, with explicit arguments. One module per role:
``database`` (where the database is, the pools), ``api`` (the API app and the services
objects its routes get), ``identity`` and ``user_activity`` (each context's parts), ``keys``
(the signing keys' parts alone), ``jobs`` (the job workers by name) and ``delivery`` (the
consumers by name, the relay). Only ``api`` imports the HTTP stack: a worker's start does not
pay for it.
"""
