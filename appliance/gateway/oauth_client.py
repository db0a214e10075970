"""What the appliance publishes about itself as an OAuth client (issue 19).

Its Client ID Metadata Document, served at ``/oauth/client-metadata.json``: the document an
authorization server fetches when the appliance presents that URL as its ``client_id``
(``oauthclient/identity.py`` decides when it does). Built from the settings alone; None when
no public URL is set, since without one there is no callback to name.
"""

from __future__ import annotations

from typing import Any

from appliance.config import Settings
from appliance.oauthclient import identity


def client_metadata(settings: Settings) -> dict[str, Any] | None:
    return identity.document(settings)
