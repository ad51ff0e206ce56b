"""Importers that convert other tools' price catalogs into gpulease catalogs."""
