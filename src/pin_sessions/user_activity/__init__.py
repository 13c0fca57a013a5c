"""user-activity: the guest/user device Session, its views and actions, the closer."""
