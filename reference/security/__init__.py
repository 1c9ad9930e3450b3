"""Listeners and their security protocols, TLS, SASL, principals and the authorizer (README.md)."""
