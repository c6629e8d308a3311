"""Fixture: the same call inside an effectgate adapter is behind the boundary."""

import stripe

from effectgate import Adapter


class StripeAdapter(Adapter):
    def execute(self, request, *, timeout):  # type: ignore[no-untyped-def]
        return stripe.PaymentIntent.create(amount=1, idempotency_key=request.operation_key)
