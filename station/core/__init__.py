"""Floor 1, the engine: the tick loop, a turn, the action parser, prompts, the context rooms act
through, the store, agents and lifecycle, the room and hook API. It knows no room, no research
task, no provider and no executor."""
