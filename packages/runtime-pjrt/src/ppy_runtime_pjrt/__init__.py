"""ppy runtime_pjrt."""
