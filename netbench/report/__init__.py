"""Presentation: console progress and tables, dashboards."""
