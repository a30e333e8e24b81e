"""HTTP plumbing shared by every controller: auth, errors, request context, bodies."""
