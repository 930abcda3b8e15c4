"""Small stand-ins for the parts of OpenEvolve and ShinkaEvolve that their task folders import
(`openevolve.evaluation_result`, `shinka.core`), written from their documented behaviour. The
scorer's sandbox puts this folder on the import path (after the installed packages), so such an
evaluator runs unchanged without those frameworks installed."""
