"""What the tool-call repairs share: matching deltas to calls, mending arguments, naming
calls, making up ids."""
