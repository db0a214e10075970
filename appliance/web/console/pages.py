"""The console's pages beyond sign-in and toolkits, each in its own module: importing this
one registers their routes on the console's blueprint (``routes.bp``) before the app takes it."""

from appliance.web.console import (
    agents,
    approvals,
    connections_page,
    overview,
    people,
    playground,
    settings_page,
)

__all__ = ["agents", "approvals", "connections_page", "overview", "people", "playground", "settings_page"]
