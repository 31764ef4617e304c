"""MkDocs hooks of the documentation site (mkdocs.yml)."""
