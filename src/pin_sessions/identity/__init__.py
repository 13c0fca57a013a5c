"""identity: phone sign-in, refresh sessions, ExpireSessionsJob, session retention."""
