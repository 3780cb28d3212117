"""Alerts: rules (pure decisions), channels (webhook and mail), the runner that keeps state."""
