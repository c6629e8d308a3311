"""A secrets-manager hook for the credential tests (names what a real hook would fetch)."""


def smtp_password() -> str:
    return "CANARY-smtp-pass"
