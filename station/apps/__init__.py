"""Floor 4, the applications: the `station` command, the web viewer and console, the readers, the
status report, the doctor, and the assembly of a world from a station's config."""
