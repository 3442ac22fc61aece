"""netbay: first-class cloud networking for containers, on one machine or a cloud."""

__version__ = "0.1.0"
