"""Running research evaluations: the recorded path of one evaluation, the background worker, the debugger."""
