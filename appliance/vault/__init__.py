"""The vault room: credentials sealed with AES-256-GCM under versioned data keys."""
