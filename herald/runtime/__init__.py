"""What every Herald process shares at run time: its identity, its connections (opened and
closed by the composition root), its part in the cancel protocol, its heartbeat, its health and
metrics endpoint, and the worker loop with its graceful stop."""
