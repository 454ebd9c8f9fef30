"""spectax: is speculative decoding paying for itself on this endpoint?"""

__version__ = "0.1.0"
