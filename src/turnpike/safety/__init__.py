"""Safety: classifies conversation text (an ML classifier plus credential detectors)."""
