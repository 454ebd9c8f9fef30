"""The live llama.cpp tier's helpers: a real `llama-server` (CPU build) on loopback."""
