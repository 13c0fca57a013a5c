"""PIN sessions subsystem."""
