"""ppy plugin_xla."""
