"""Entry point of the one-file binary and of ``python -m appliance``."""

from appliance.cli import main

if __name__ == "__main__":
    main()
