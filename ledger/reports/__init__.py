"""Finance reports: account statements for a period, revenue by model, account or day."""
