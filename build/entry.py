"""Entry script of the one-file binary (PyInstaller needs a file, not a module path)."""

from appliance.cli import main

if __name__ == "__main__":
    main()
