"""The admin console (issue 18): server-rendered pages under ``/console``, a face like the rest
of ``web/``: it parses forms, asks ``gateway/admin`` and renders Jinja2 templates; htmx (a
vendored static file) only swaps fragments the server rendered."""
