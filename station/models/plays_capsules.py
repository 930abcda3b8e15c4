"""Scripted plays for the capsule rooms (private and public memory, archive, mail)."""
