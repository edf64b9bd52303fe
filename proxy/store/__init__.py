"""What the proxy keeps between exchanges: one bounded key-value store (in this process, or in
Redis shared by every replica) for receipts, learned rules, the fronts' turns and Responses
transcripts, and how it is opened and watched."""
