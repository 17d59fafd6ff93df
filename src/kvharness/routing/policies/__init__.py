"""Built-in routing policies; importing this package registers them."""
