"""Credit grants: credit finance gives an account, consumed before paid balance, expiring."""
