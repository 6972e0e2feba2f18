"""Reading benchmark runs back from MLflow into pandas, and the paper's tables and figures."""
