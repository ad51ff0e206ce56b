"""The idle reaper: pure idle decisions plus per-cloud discovery and actions behind adaptors."""
