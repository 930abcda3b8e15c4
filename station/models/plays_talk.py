"""Scripted plays for the Common Room and the Reflection Chamber (filled in with those rooms)."""
