"""Named hand plans as pin files (TOML, keyed by axis role): see autoshard.planning.named."""
