"""gradpick: exact input gradients for the images you pick from a batch."""

__version__ = "0.1.0"
