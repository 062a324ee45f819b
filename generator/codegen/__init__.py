"""Code generation: plan (archive + options -> typed plan), render (Jinja2 over templates/),
pipeline (read -> plan -> render -> write gen/).  Knows no board files: the build stage
hands it a board's data."""
