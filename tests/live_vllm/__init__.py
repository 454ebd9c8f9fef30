"""The live-vLLM test tier: real `vllm serve` processes (CPU build) on loopback."""
