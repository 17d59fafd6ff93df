"""Agent harness: tool-calling agent loop, scripted agents, rollout recording."""
