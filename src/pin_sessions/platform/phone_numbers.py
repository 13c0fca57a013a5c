"""Phone numbers as the API and the command line accept them: E.164, nothing else."""

from __future__ import annotations

# "+", a non-zero country code digit, 7 to 15 digits in all (ITU-T E.164).
E164_PATTERN = r"^\+[1-9][0-9]{6,14}$"
E164_IN_WORDS = (
    "a phone number in international E.164 form: '+' and 7 to 15 digits, e.g. +15550100200"
)


def masked_phone_number(number: str) -> str:
    """The number as a log line may show it (SPEC §7): its last 2 digits, the rest starred."""
    return "*" * max(0, len(number) - 2) + number[-2:]
