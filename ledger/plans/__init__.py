"""Price plans: finance's discounts, markups and per-model rates, assigned to accounts."""
