"""A local FCM HTTP v1 stand-in for the demo and the tests (never used in production)."""
