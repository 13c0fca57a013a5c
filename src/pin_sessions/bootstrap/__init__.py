"""The composition root: settings in, a wired process out.

Nothing here connects at import time or reads the environment: each CLI command loads
the settings and calls these builders once, with explicit arguments. One module per role:
``database`` (where the database is, the pools), ``api`` (the API app), ``identity`` and
``user_activity`` (each context's services), ``jobs`` (the job workers by name) and
``delivery`` (the consumers by name, the relay).
"""
