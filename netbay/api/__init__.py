"""HTTP only: the app factory, auth, error formats and one module per API family."""
