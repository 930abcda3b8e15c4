"""The choices the reader commands offer, shared by their parser (readers_cli.py, which must stay
light to import), the readers themselves and the web's papers page."""

ROOMS = {"public": "public_memory", "mail": "mail", "private": "private_memory", "archive": "archive"}
PAPER_STATES = ("accepted", "rejected", "pending", "failed")
