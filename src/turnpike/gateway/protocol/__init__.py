"""The API's wire shapes and rules, free of I/O: requests, items, tools, events, errors."""
