"""What the gateway tells its operators: spans, turn metrics, access lines and
the live dashboard."""
