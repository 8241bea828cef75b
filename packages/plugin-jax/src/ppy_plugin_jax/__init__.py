"""ppy plugin_jax."""
