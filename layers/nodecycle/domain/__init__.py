"""The domain: plain Python that takes its ports through constructors and knows nothing of AWS or Lambda."""
