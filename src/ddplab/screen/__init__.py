"""What a reader sees: slider panels (widgets), figures updated in place, static panels."""
