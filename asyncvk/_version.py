"""The release version; a cache file records it (a release, never a build date)."""

__version__ = "0.1.0"
