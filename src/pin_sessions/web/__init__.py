"""The browser-facing pages of the HTTP shell: the dev-stats dashboard, the tracker demo, and
the tracker script itself. Not a bounded context: the pages only call the public API."""
