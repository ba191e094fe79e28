"""finder."""
