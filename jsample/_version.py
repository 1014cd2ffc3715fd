"""Version numbers shared by both frontends (no framework imports)."""

__version__ = "0.1.0"

# Version of the random-stream contract in docs/STREAM.md that every kernel implements.
# Any change to which random words feed which token is a new stream version, never a quiet fix.
STREAM_VERSION = 1
