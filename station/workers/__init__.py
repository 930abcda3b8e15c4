"""Workers (floor 2): tool-using loops driven by a model, such as the research coder and the archive
surveyor. The loop runs on the trusted side and records every model reply and tool result as an
input; every command a tool runs executes in the sandbox (docs/workers.md)."""
