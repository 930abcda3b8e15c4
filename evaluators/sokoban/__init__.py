"""Sokoban: a reverse-play level generator and the reference rules the station verifies solutions with."""
