"""What the gateway calls: the backend services, billing, and the PDF worker processes."""
