"""The blocking API (threads): ``dlock_client.Client`` and what it hands out."""
