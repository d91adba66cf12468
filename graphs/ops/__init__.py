"""Built-in op kinds; importing this package registers them."""
