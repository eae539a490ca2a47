"""Presentation: the printed table, HTML reports, JUnit XML, plots."""
