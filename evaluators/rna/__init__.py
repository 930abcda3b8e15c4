"""RNA modelling on the 7 sequence-level BEACON datasets: their definitions, a seeded synthetic sample, the reader of the real files, the data on disk and the station's measurement."""
