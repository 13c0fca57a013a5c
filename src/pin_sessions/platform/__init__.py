"""What the bounded contexts share: database, clock, errors, HTTP shell, observability."""
