"""The load generator: HTTP client, request driving, arrivals, prompts."""
