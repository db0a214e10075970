"""HTTP: the Sanic app, its blueprints and header checks; the only place errors become HTTP."""
