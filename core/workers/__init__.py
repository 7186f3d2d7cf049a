"""Workers: registry, health, circuit breakers, retries and the request dispatcher."""
